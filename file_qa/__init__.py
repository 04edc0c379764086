"""Top-level alias so verifiers finds the bundled ``file-qa`` environment by id.

With verifiers 0.3 (classic API) ``vf.load_environment("file-qa")`` calls ``load_environment``;
with verifiers 0.4 (v1 API) ``vf-eval file-qa`` loads the ``Taskset`` exported here.
"""

from pytest_modal_eval.client.verifiers_adapter import installed_api
from pytest_modal_eval.envs.file_qa import load_environment

__all__ = ["load_environment"]

if installed_api() == "v1":
    from pytest_modal_eval.envs.file_qa_v1 import FileQATaskset

    __all__ += ["FileQATaskset"]
