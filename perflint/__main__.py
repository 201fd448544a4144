"""`python -m perflint`: the same command line as `perflint`."""

from perflint.cli import main

if __name__ == "__main__":
    main(prog_name="perflint")
