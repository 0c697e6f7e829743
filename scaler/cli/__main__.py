"""``python -m scaler.cli``: the ``forescale`` command."""

from . import main

if __name__ == "__main__":
    main()
