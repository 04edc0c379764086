"""The model client behind verifiers' interception server (:class:`PluginClient`: the
plugin's :class:`~pytest_modal_eval.client.direct_client.DirectOpenAI` sends each request) and
that server (:class:`PluginInterception`), on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import verifiers.v1 as vf
from pydantic import ValidationError
from pydantic_core import from_json
from verifiers.v1.clients.client import RelayReply
from verifiers.v1.dialects import Dialect
from verifiers.v1.errors import model_error
from verifiers.v1.interception import InterceptionServer
from verifiers.v1.mcp import SharedToolServer
from verifiers.v1.session import RolloutSession

from pytest_modal_eval.client.answer_journal import current_example
from pytest_modal_eval.client.direct_client import DirectOpenAI, slot_waits
from pytest_modal_eval.client.observe import current_rollout
from pytest_modal_eval.client.rollout_seeds import seeded
from pytest_modal_eval.client.verifiers_v1_seats import SeatClients


@dataclass
class Rollout:
    """One rollout of an example as its model calls know it: which example (the answer
    journal's key), which rollout (its seed) and the seconds its requests waited for a slot."""

    example_id: int
    index: int
    waits: list[float]


class PluginClient(vf.Client):  # type: ignore[misc]
    """The model client behind verifiers' interception server: the plugin's
    :class:`DirectOpenAI` sends each request, seeded for its rollout and keyed for the answer
    journal by its example."""

    def __init__(self, direct: DirectOpenAI, rollouts: dict[str, Rollout] | None = None) -> None:
        self.direct = direct
        # trace id -> its rollout (shared by the clients of one run's endpoints)
        self.rollouts: dict[str, Rollout] = {} if rollouts is None else rollouts
        self._http = direct._http

    async def get_response(
        self,
        dialect: Dialect,
        body: dict[str, Any],
        sampling: vf.SamplingConfig,
        session_id: str | None = None,
        turn: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> vf.Response:
        rollout = self.rollouts.get(session_id or "")
        if rollout is not None:
            body = dict(seeded(body, rollout.index))
        example_token = current_example.set(rollout.example_id if rollout else None)
        waits_token = slot_waits.set(rollout.waits if rollout else None)
        rollout_token = current_rollout.set(
            (rollout.example_id, rollout.index) if rollout else None
        )
        try:
            answer = await self.direct.post(
                dialect.upstream_path, body=body, cast_to=self._http.Response, options={}
            )
        except Exception as exc:
            raise _provider_error(exc) from exc
        finally:
            current_rollout.reset(rollout_token)
            slot_waits.reset(waits_token)
            current_example.reset(example_token)
        try:
            raw = from_json(answer.content)
            response = dialect.parse_response(dialect.validate_response(raw))
        except (ValueError, ValidationError) as exc:
            raise model_error(
                f"malformed upstream response: {type(exc).__name__}: {exc}", status_code=502
            ) from exc
        response.raw = raw
        return response

    async def relay(
        self,
        dialect: Dialect,
        body: dict[str, Any],
        session_id: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> RelayReply:
        """A streamed turn (verifiers' harness programs stream): asked whole through
        :meth:`get_response` (so it is capped, journaled, seeded and retried like any other)
        and handed back as the dialect's server-sent events, which the interception server
        reads to the end before it serves the turn anyway."""
        whole = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
        response = await self.get_response(
            dialect, whole, vf.SamplingConfig(), session_id=session_id, headers=headers
        )
        events = list(dialect.stream_events(response.raw or {}))

        async def chunks() -> AsyncIterator[bytes]:
            for event in events:
                yield event

        async def close() -> None:
            pass

        return RelayReply(content_type="text/event-stream", chunks=chunks(), close=close)

    async def close(self) -> None:
        pass  # closed by the run, which owns it


def _provider_error(exc: Exception) -> Exception:
    """openai's exception as verifiers' ``ProviderError`` (recorded on the trace as such)."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        error: Exception = model_error(str(exc), status_code=exc.status_code)
        return error
    if isinstance(exc, openai.APITimeoutError):
        error = model_error(str(exc) or "request timed out", status_code=504)
        return error
    if isinstance(exc, openai.APIConnectionError):
        error = model_error(str(exc) or "connection error", status_code=503)
        return error
    return exc


class PluginInterception(InterceptionServer):  # type: ignore[misc]
    """verifiers' interception server on 127.0.0.1 whose rollouts use ``client``, but those
    of a seat that pins an endpoint of its own: the client ``seat_clients`` gives for it.

    ``shared_tools`` are the taskset's tool servers started for the run: those that keep
    per-rollout state reach it here with their own secret."""

    def __init__(
        self,
        client: PluginClient,
        shared_tools: Mapping[str, SharedToolServer] = {},
        seat_clients: SeatClients | None = None,
    ) -> None:
        super().__init__(
            requires_tunnel=False,
            state_service_secrets=tuple(
                server.state_secret for server in shared_tools.values() if server.state_secret
            ),
        )
        self.plugin_client = client
        self.seat_clients = seat_clients

    def register(self, session: RolloutSession) -> tuple[str, str]:
        secrets: tuple[str, str] = super().register(session)
        own = self.seat_clients.for_config(session.ctx.client) if self.seat_clients else None
        session.client = own or self.plugin_client
        return secrets
