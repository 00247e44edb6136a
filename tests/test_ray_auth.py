"""Ray's default token authentication from depthlab's side: token mode when a token is found here, the
user's own RAY_AUTH_MODE respected, and a connection that fails named in one line with what is missing.
(tests/test_study_ray_cluster.py runs a real `ray start --head` with the default authentication.)"""

from __future__ import annotations

import types

import pytest

from depthlab import InputError
from depthlab.study import ray_auth


@pytest.fixture
def home(tmp_path, monkeypatch):
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.setenv(name, "")  # recorded, so that what the code sets is undone after the test
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_a_token_in_the_home_folder_turns_token_mode_on(home, monkeypatch):
    assert ray_auth.use_token_if_found() is None and "RAY_AUTH_MODE" not in ray_auth.os.environ
    (home / ".ray").mkdir()
    (home / ".ray" / "auth_token").write_text("abc")
    assert ray_auth.use_token_if_found() == str(home / ".ray" / "auth_token")
    assert ray_auth.os.environ["RAY_AUTH_MODE"] == "token"


def test_the_users_own_mode_and_token_are_respected(home, monkeypatch):
    (home / ".ray").mkdir()
    (home / ".ray" / "auth_token").write_text("abc")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert ray_auth.use_token_if_found() is None and ray_auth.os.environ["RAY_AUTH_MODE"] == "disabled"
    monkeypatch.delenv("RAY_AUTH_MODE")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "xyz")
    assert ray_auth.use_token_if_found() == "RAY_AUTH_TOKEN"


def _fake_ray(error):
    def init(**kwargs):
        raise error

    exceptions = types.SimpleNamespace(AuthenticationError=type("AuthenticationError", (RuntimeError,), {}))
    return types.SimpleNamespace(init=init, exceptions=exceptions)


def test_a_failed_connection_says_what_is_missing_in_one_line(home):
    with pytest.raises(InputError) as e:
        ray_auth.connect(
            _fake_ray(ConnectionError("Failed to connect to Ray cluster at 10.0.0.1:6379")), "10.0.0.1:6379"
        )
    text = str(e.value)
    assert "\n" not in text and "ray status --address 10.0.0.1:6379" in text
    assert "copy the head's ~/.ray/auth_token" in text and "RAY_AUTH_TOKEN" in text
