"""The ``tensortrace`` command's entry point, and ``python -m tensortrace``.

The command's modules are imported as long-lived objects (``collector.long_lived``):
the garbage collector never walks them again in this process.
"""

from .trace import collector


def main() -> None:
    """Entry point of the ``tensortrace`` command and ``python -m tensortrace``."""
    collector.own_process()
    with collector.long_lived():
        from .cli.main import main as cli_main
    cli_main(own_process=True)


if __name__ == "__main__":
    main()
