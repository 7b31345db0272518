"""The one reading of a server URL that top and bench share."""

from __future__ import annotations

import pytest

from engine.endpoints import normalize_base_url
from engine.errors import BadInput


@pytest.mark.parametrize(
    "text, url",
    [
        ("127.0.0.1:8000", "http://127.0.0.1:8000"),
        (" http://a:8000/ ", "http://a:8000"),
        ("http://a:8000/v1/", "http://a:8000"),  # the OpenAI base URL of a client's configuration
        ("a:8000/v1", "http://a:8000"),
        ("https://serve.example/team-a", "https://serve.example/team-a"),
        ("[::1]:8000", "http://[::1]:8000"),
    ],
)
def test_a_server_root_from_what_people_type(text, url):
    assert normalize_base_url(text) == url


@pytest.mark.parametrize("text", ["ftp://a:1", "http://", "", "http://a b:1", "http://a:port", "http://a:70000"])
def test_anything_else_is_bad_input_with_a_fix(text):
    with pytest.raises(BadInput) as err:
        normalize_base_url(text)
    assert "not an http(s) URL" in err.value.cause and "http://127.0.0.1:8000" in err.value.fix
