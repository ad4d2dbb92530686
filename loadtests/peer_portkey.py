"""The Portkey AI gateway (Node.js) as a benchmark peer: installed from the npm registry into
its own folder and pointed at one simulated engine as an ``openai`` provider with a custom
host.

Portkey takes its routing from request headers (``x-portkey-provider``,
``x-portkey-custom-host``); the client's bearer token is passed through to the engine, which
ignores it. Its server has no bind-address option and listens on every interface, so it is
started with a small preload (``--require``) that binds its listener to 127.0.0.1.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

PORTKEY_VERSION = "1.15.2"
PACKAGE = "@portkey-ai/gateway"

# Node preload: every listen() without a host goes to 127.0.0.1 (the benchmark's rule).
_LOOPBACK_CJS = """\
'use strict';
const net = require('net');
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' && typeof args[1] !== 'string') {
    args.splice(1, 0, '127.0.0.1');
  } else if (args[0] && typeof args[0] === 'object' && !args[0].host && !args[0].path) {
    args[0] = { ...args[0], host: '127.0.0.1' };
  }
  return listen.apply(this, args);
};
"""


def ensure_portkey(folder: Path, version: str) -> Path:
    """An npm folder at ``folder`` with ``@portkey-ai/gateway@version``; returns its server
    script (``build/start-server.js``).

    Idempotent: an existing install of that version is reused. Raises FileNotFoundError
    when ``npm`` is missing and CalledProcessError when the install fails.
    """
    pkg = folder / "node_modules" / "@portkey-ai" / "gateway"
    script = pkg / "build" / "start-server.js"
    manifest = pkg / "package.json"
    if script.exists() and json.loads(manifest.read_text()).get("version") == version:
        (folder / "loopback.cjs").write_text(_LOOPBACK_CJS)
        return script
    npm = shutil.which("npm")
    if npm is None:
        raise FileNotFoundError("npm is not installed (apt-get install nodejs npm)")
    started = time.monotonic()
    print(f"installing {PACKAGE}@{version} into {folder} ...", flush=True)
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "package.json").exists():
        (folder / "package.json").write_text('{"private": true}\n')
    subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--omit=dev", "--loglevel=error",
         f"{PACKAGE}@{version}"],
        cwd=folder, check=True,
    )  # fmt: skip
    (folder / "loopback.cjs").write_text(_LOOPBACK_CJS)
    print(f"  installed in {time.monotonic() - started:.0f} s", flush=True)
    return script


# Portkey 1.15.2 appends its x-portkey-* headers to the upstream fetch() Response, whose
# headers are immutable in Node's undici: every streamed answer is a 500 ("TypeError:
# immutable"). The patch copies the response into a new one (same body stream, status and
# headers, now mutable) before the headers are appended.
_STREAM_BUG = "this.updateHeaders(i,n.cacheStatus,o)"
_STREAM_FIX = (
    "i=new Response(i.body,{status:i.status,statusText:i.statusText,headers:i.headers}),"
    + _STREAM_BUG
)


def patched_script(script: Path) -> Path:
    """A copy of the server script next to it (so its imports resolve alike) with the
    streaming fix applied. Raises ValueError when this version does not have the bug's code."""
    text = script.read_text()
    if text.count(_STREAM_BUG) != 1:
        raise ValueError(f"{script}: the streaming-bug code is not there once; no patch")
    out = script.with_name("start-server.stream-patched.js")
    out.write_text(text.replace(_STREAM_BUG, _STREAM_FIX))
    return out


def portkey_command(script: Path, port: int) -> list[str]:
    """The command line of one Portkey gateway process on 127.0.0.1:``port``."""
    node = shutil.which("node") or "node"
    preload = script.parents[4] / "loopback.cjs"  # folder/node_modules/@portkey-ai/gateway/build
    return [node, "--require", str(preload), str(script), f"--port={port}", "--headless"]


def portkey_env(base: dict[str, str]) -> dict[str, str]:
    """Environment of the Portkey gateway: production mode (no log UI, no log stream)."""
    return base | {"NODE_ENV": "production", "ENVIRONMENT": "production"}


def portkey_headers(engine_url: str) -> dict[str, str]:
    """Request headers that route a chat request through Portkey to the engine."""
    return {
        "x-portkey-provider": "openai",
        "x-portkey-custom-host": f"{engine_url}/v1",
        "authorization": "Bearer sk-engine-needs-none",
    }


def stream_problem(url: str, headers: dict[str, str], model: str) -> str:
    """Send one streamed chat request to the gateway at ``url``: "" if the answer ends with
    ``data: [DONE]``, else what went wrong (never raises for an HTTP or socket error)."""
    body = json.dumps({"model": model, "stream": True, "max_tokens": 4,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()  # fmt: skip
    req = urllib.request.Request(
        url + "/v1/chat/completions", data=body,
        headers={"content-type": "application/json", **headers},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            data = resp.read()
    except OSError as exc:
        detail = exc.read()[:200] if isinstance(exc, urllib.error.HTTPError) else b""
        return f"{exc} {detail!r}"
    return "" if b"data: [DONE]" in data else f"no [DONE] in {data[-200:]!r}"
