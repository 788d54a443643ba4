#!/bin/sh
# The unit's preStop hook (deploy/kubernetes/unit.yaml), run before Kubernetes sends SIGTERM to the
# pod: stop the gateway first, while its workers still run. The gateway stops accepting connections
# (HAProxy in front takes the refused connection as the gateway going down and sends the request to
# another unit) and finishes every request it holds; supervisorctl returns once it has exited.
# Only then does SIGTERM reach supervisord, which stops the workers, idle by now. supervisord's own
# priorities stop the gateway first too (conf/supervisord.conf); the hook does it before the pod's
# SIGTERM, inside the grace period, whatever the configuration rendered into the image.
set -e
run_dir=$(python -c 'from shared.config import load_settings; print(load_settings().run_path)')
exec supervisorctl -c "$run_dir/supervisord.conf" stop gateway
