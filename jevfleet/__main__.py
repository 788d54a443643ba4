import sys

from jevfleet.cli import main

sys.exit(main())
