"""vLLM's own start-up phase, read from its log: what a server that is not up yet is doing.

vLLM logs each step of its start-up; the last step logged is the one under way. The lines
matched are vLLM's (0.x, CPU and GPU builds) and uvicorn's; a log with none of them (an older
or a quieter vLLM) gives no phase, and the status line then shows the seconds alone.
"""

from __future__ import annotations

import re

#: (what the line says, the phase it starts): the latest match in the log wins, and of two
#: at one place the one listed later ("Loading weights took" has loaded them).
PHASES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), name)
    for pattern, name in (
        (r"non-default args", "reading its configuration"),
        (r"Initializing a V\d LLM engine|Initializing an LLM engine", "starting the engine"),
        (r"Starting to load model|Initializing model took|Loading safetensors|Loading weights",
         "loading weights"),
        (r"Model loading took|Loading weights took", "weights loaded"),
        (r"torch\.compile takes|Compiling a graph|Dynamo bytecode transform|Start compiling"
         r"|Warming up model for the compil", "compiling (torch.compile)"),
        (r"KV cache size|for KV cache|KV cache layout", "sizing the KV cache"),
        (r"Capturing (CUDA )?graphs|Capturing model|Graph capturing", "capturing graphs"),
        (r"init engine \(profile", "engine ready"),
        (r"Starting vLLM (API )?server|Available routes", "starting the API server"),
        (r"Application startup complete", "application startup complete"),
    )
)  # fmt: skip


def latest_phase(log: str) -> str | None:
    """The phase the last recognised line of ``log`` starts, or None."""
    found: tuple[int, str] | None = None
    for pattern, name in PHASES:
        for match in pattern.finditer(log):
            if found is None or match.start() >= found[0]:
                found = (match.start(), name)
    return found[1] if found else None
