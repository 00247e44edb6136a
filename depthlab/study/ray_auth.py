"""Connecting to a Ray cluster as Ray ships it: token authentication on by default.

Ray 2.60 starts a cluster with token authentication wherever a token exists: ``ray start --head``
turns it on when it finds one (``~/.ray/auth_token``, written by ``ray get-auth-token --generate`` or by
the first local ``ray.init()``), and every process that joins or connects must send it. A client that
connects to an address sends it only in token mode (``RAY_AUTH_MODE=token``); left unset, Ray does not
look for the token and the connection fails after about 20 s of "InvalidAuthToken" warnings. So, with
``RAY_AUTH_MODE`` unset and a token found here (``RAY_AUTH_TOKEN``, the file ``RAY_AUTH_TOKEN_PATH``
names, or ``~/.ray/auth_token``), depthlab connects in token mode; a cluster without authentication
accepts such a client as well (tested). Where the connection still fails, one line says what is
missing: the cluster, or its token on this machine.
"""

from __future__ import annotations

import os
from pathlib import Path

from depthlab.errors import InputError

MODE = "RAY_AUTH_MODE"


def token_source() -> str | None:
    """Where Ray would read this machine's token from, or None when there is none."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    named = os.environ.get("RAY_AUTH_TOKEN_PATH")
    path = Path(named).expanduser() if named else Path.home() / ".ray" / "auth_token"
    return str(path) if path.is_file() and path.stat().st_size else None


def use_token_if_found() -> str | None:
    """Set ``RAY_AUTH_MODE=token`` for this process (before Ray is imported) when the mode is unset and a
    token is found; returns the token's source when token mode is on, else None."""
    mode = os.environ.get(MODE, "").strip().lower()
    if mode and mode != "token":
        return None  # the user chose: respect it
    source = token_source()
    if source is not None and not mode:
        os.environ[MODE] = "token"
    return source


def connect(ray, address: str, **options) -> None:
    """``ray.init(address=...)`` with the token mode above; InputError (one line) when it cannot connect,
    naming what is missing."""
    unset = not os.environ.get(MODE)
    source = use_token_if_found()
    if unset and os.environ.get(MODE):  # Ray read its mode when imported: have it read it again, as
        refresh = getattr(getattr(ray, "_raylet", None), "Config", None)  # ray.init does for a new cluster
        if refresh is not None:
            refresh.initialize("")
    try:
        ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ray.exceptions.AuthenticationError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        token = (
            f"this machine's token ({source}) is not the cluster's: copy the head's ~/.ray/auth_token here"
            if source
            else "a cluster with token authentication (Ray's default where a token exists) needs its token "
            "here: copy the head's ~/.ray/auth_token to ~/.ray/auth_token, or set RAY_AUTH_TOKEN"
        )
        raise InputError(
            f"--ray-address {address}: cannot connect ({first}); is the cluster up (ray status --address "
            f"{address})? If it is, {token}"
        ) from None
