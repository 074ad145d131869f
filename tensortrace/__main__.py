"""``python -m tensortrace``: the same as the ``tensortrace`` command."""

from .cli import main

if __name__ == "__main__":
    main()
