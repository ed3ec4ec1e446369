"""``python -m fieldmem``: the same as the ``fieldmem`` command."""

from fieldmem.frontends.entry import main

if __name__ == "__main__":
    main()  # ends the process (fieldmem.frontends.entry.leave)
