"""``python -m helpers.mfu``."""

from ._cli import main

main()
