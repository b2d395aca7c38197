"""`python -m emulator ...` is the `hetero-emu` command (the SDK session starts its job drivers so,
with the interpreter that runs the user's code)."""

from emulator.cli import main

main()
