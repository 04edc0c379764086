"""``python -m pytest_modal_eval``: the same command line as ``pytest-modal-eval``."""

from pytest_modal_eval.cli import main

if __name__ == "__main__":
    main(prog_name="pytest-modal-eval")
