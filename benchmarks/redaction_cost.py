"""Redaction cost: what keeping secrets out of every output costs a run's throughput.

The same run (``--examples`` arithmetic questions, 64 in flight, against
``tests/support/openai_server.py`` answering at once, so the plugin's own work is all there
is to measure) in three environments, interleaved and repeated:

- no secrets: no secret-named variable is set, so the redactor has nothing to search for;
- secrets: four secret-named variables hold keys with quotes, backslashes, ``/``, ``<`` and
  ``&`` (each searched for in 180 or so escaped forms), none of which the run's text holds:
  every string is checked, and passed over;
- echoed: the same, and every answer of the model quotes one of the keys, so every record,
  report and log line holding it is rewritten;
- key file: the four keys and a service account's key (pretty-printed JSON with a 1.6 kB
  private key) in ``GCP_SA_KEY``, searched for whole, line by line and by its inner values,
  which the run's text does not hold.

Target: secrets >= 0.95x the requests/s of no secrets. Run: ``.venv/bin/python -m
benchmarks.redaction_cost`` (about a minute).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from benchmarks._common import (
    bench_env,
    configure_server,
    fake_server,
    header,
    log,
    make_project,
    median,
    print_table,
    run_plugin,
    verdict,
    write_arithmetic,
)
from pytest_modal_eval.redact import Redactor, is_secret_name, secret_forms

SECRETS = {
    "ACME_API_KEY": 'sk-proj-a/b+c"d\\e<f>&g-0123456789',
    "HF_TOKEN": "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345",
    "GATEWAY_SECRET": "gw/secret+with/slashes==",
    "MISTRAL_KEY": "mistral-'quoted'-key-99",
}
#: A service account's key, as ``GCP_SA_KEY`` would hold it.
SERVICE_ACCOUNT = json.dumps(
    {
        "type": "service_account",
        "project_id": "bench-project-1234",
        "private_key_id": "0123456789abcdef0123456789abcdef01234567",
        "private_key": "-----BEGIN PRIVATE KEY-----\n"
        + "\n".join("MIIEv" + "QIBADANBgkqhkiG9w0BAQEFAASC" * 2 + f"{i:04d}" for i in range(26))
        + "\n-----END PRIVATE KEY-----\n",
        "client_email": "bench@bench-project-1234.iam.gserviceaccount.com",
        "client_id": "123456789012345678901",
        "token_uri": "https://oauth2.googleapis.com/token",
    },
    indent=2,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    header("redaction cost: throughput with and without secrets to keep out")
    present = sorted(k for k in bench_env() if is_secret_name(k))
    if present:
        raise SystemExit(f"unset the secret-named variables {present} to measure without them")
    contenders = {
        "no secrets": ({}, {}),
        "secrets": (SECRETS, {}),
        "echoed": (SECRETS, {"What is": f"The key is {SECRETS['ACME_API_KEY']}."}),
        "key file": ({**SECRETS, "GCP_SA_KEY": SERVICE_ACCOUNT}, {}),
    }
    rps: dict[str, list[float]] = {name: [] for name in contenders}
    with tempfile.TemporaryDirectory(prefix="bench-redact-") as tmp, fake_server() as url:
        root = Path(tmp)
        data = write_arithmetic(root / "data.jsonl", args.examples)
        for round_ in range(args.repeats):
            for name, (env, replies) in contenders.items():
                configure_server(url, replies=replies)
                project = make_project(root / f"{name}-{round_}".replace(" ", "-"), data)
                run = run_plugin(project, url, env=env)
                if run.returncode not in (0, 1):
                    raise SystemExit(f"{name}: pytest exited {run.returncode} in {project}")
                log(f"round {round_ + 1} {name}: {run.rps:.0f} requests/s")
                rps[name].append(run.rps)
    forms = sum(len(secret_forms(v)) for v in SECRETS.values())
    base = median(rps["no secrets"])
    print_table(
        ["environment", "requests/s (median)", "ratio to no secrets"],
        [[name, f"{median(v):.0f}", f"{median(v) / base:.3f}"] for name, v in rps.items()],
    )
    ratio = median(rps["secrets"]) / base
    print(f"{len(SECRETS)} secrets, {forms} forms searched for")
    print(f"secrets >= 0.95x no secrets: {ratio:.3f} {verdict(ratio >= 0.95)}")
    keyed = Redactor.from_environ({**SECRETS, "GCP_SA_KEY": SERVICE_ACCOUNT})
    print(f"with the key file: {len(keyed.values)} texts, {len(keyed.to_json()['forms'])} forms")
    return 0 if ratio >= 0.95 else 1


if __name__ == "__main__":
    raise SystemExit(main())
