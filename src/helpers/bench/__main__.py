"""``python -m helpers.bench calibrate``: see :mod:`helpers.bench._calibrate`."""

import sys

from ._calibrate import main

if __name__ == "__main__":  # the hog's spawned processes import this module again
    sys.exit(main())
