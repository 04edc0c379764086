"""Top-level alias so verifiers v1 finds the plugin's harness by id (``pytest-modal-eval-chat``).

verifiers 0.4 resolves a harness id to a top-level module exporting a ``Harness`` subclass.
"""

from pytest_modal_eval.client.verifiers_v1_harness import ChatHarness

__all__ = ["ChatHarness"]
