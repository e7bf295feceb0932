"""``python -m helpers.checkpointing``: every plan of the course model, measured side by side."""

from ._plans import main

if __name__ == "__main__":
    raise SystemExit(main())
