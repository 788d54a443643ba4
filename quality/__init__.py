"""Answer quality: run a labeled question set through the engine, score the probabilities
(accuracy, Brier, ECE, reliability diagram) and fit the profile's calibration.

`jevfleet eval` and `jevfleet calibrate` (jevfleet/cli.py) are thin wrappers over this package.
"""
