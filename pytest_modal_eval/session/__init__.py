"""The plugin's pytest hooks, in two session objects that hand each event to plain objects.

:class:`~.worker.WorkerSession` holds the hooks every process needs (an xdist worker, the
controller, or the only process); :class:`~.controller.ControllerSession` the hooks only the
process that shows and keeps the session's results has (the controller, or the only process).
Without xdist the one process registers both.
"""
