"""Top-level alias so ``vf.load_environment("file-qa")`` (and ``vf-eval file-qa``) find it."""

from pytest_modal_eval.envs.file_qa import load_environment

__all__ = ["load_environment"]
