"""``python -m helpers.timeline bench TRACE``: the chapter's benchmark."""

from ._bench import main

raise SystemExit(main())
