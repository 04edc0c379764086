"""OpenTelemetry traces of a session: session, benchmark, example, rollout, model request and
tool call spans, exported over OTLP/HTTP while the run goes (see docs/share.md).

Off unless the OTLP variables (or ``--otel-endpoint``) name a collector; then, and only then,
the OpenTelemetry SDK is imported (:mod:`.settings` decides without it). The session objects
drive a :class:`~pytest_modal_eval.traces.session.TraceSession`; the evaluation below tells
its observer (:mod:`.spans`) what happens through the seam in
:mod:`pytest_modal_eval.client.observe`, knowing nothing of this package.
"""
