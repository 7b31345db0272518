"""The web configuration file of Prometheus exporters (the exporter-toolkit format node_exporter
reads with --web.config.file): TLS and basic auth with bcrypt hashes, so operators reuse theirs.

    tls_server_config:
      cert_file: /etc/ascendctl/tls.crt
      key_file: /etc/ascendctl/tls.key
      client_auth_type: RequireAndVerifyClientCert   # optional, with client_ca_file
      client_ca_file: /etc/ascendctl/ca.crt
      min_version: TLS12                             # TLS10..TLS13
    basic_auth_users:
      prometheus: $2y$10$...                         # htpasswd -nBC 10 "" | tr -d ':'

A key this reader does not support is an error, never silently ignored: a file that asks for
client certificates must not run without them.
"""

from __future__ import annotations

import hashlib
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from engine.errors import BadInput
from engine.yamlfile import duplicate_keys
from engine.yamlfile import load as load_yaml_text

_TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version"}
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_FIX = "see docs/exporter.md (web configuration): the exporter-toolkit format, tls_server_config and basic_auth_users"


@dataclass
class WebConfig:
    tls: ssl.SSLContext | None = None
    users: Mapping[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash
    source: str | None = None
    _good: set = field(default_factory=set)  # digests of credentials already checked
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _dummy_hash: bytes | None = None

    def check(self, user: str, password: str) -> bool:
        """bcrypt is slow on purpose (~0.1 s): a pair that passed once is remembered by its
        digest, as exporter-toolkit caches it, so scrapes every few seconds cost nothing. An
        unknown user costs the same bcrypt round (against a dummy hash of the same cost), so the
        time of a 401 does not tell which user names exist."""
        hashed = self.users.get(user)
        if hashed is None:
            import bcrypt

            bcrypt.checkpw(password.encode(), self._dummy())
            return False
        digest = hashlib.sha256(b"\0".join([user.encode(), password.encode(), hashed])).digest()
        with self._lock:
            if digest in self._good:
                return True
        import bcrypt

        try:
            ok = bcrypt.checkpw(password.encode(), hashed)
        except ValueError:
            return False
        if ok:
            with self._lock:
                self._good.add(digest)
        return ok

    def _dummy(self) -> bytes:
        with self._lock:
            if self._dummy_hash is None:
                import bcrypt

                first = next(iter(self.users.values()), b"$2b$10$")
                try:
                    rounds = int(first.split(b"$")[2])
                except (IndexError, ValueError):
                    rounds = 10
                self._dummy_hash = bcrypt.hashpw(b"not a password", bcrypt.gensalt(max(4, min(rounds, 16))))
            return self._dummy_hash


def load_web_config(path: str | Path | None) -> WebConfig:
    if path is None:
        return WebConfig()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(
            f"cannot read the web configuration {path}: {getattr(exc, 'strerror', None) or exc}", _FIX
        ) from exc
    data = load_yaml_text(text, str(path)) or {}
    if not isinstance(data, dict):
        raise BadInput(f"{path}: the web configuration must be a mapping", _FIX)
    twice = duplicate_keys(data, str(path))
    if twice:  # one of two user maps (or TLS settings) would be dropped without a word
        raise BadInput(f"{twice[0].file}:{twice[0].line}: {twice[0].key}: {twice[0].message}", _FIX)
    unknown = set(data) - {"tls_server_config", "basic_auth_users", "http_server_config"}
    if unknown:
        raise BadInput(f"{path}: unsupported key(s) {', '.join(sorted(unknown))}", _FIX)
    http_cfg = data.get("http_server_config")
    if http_cfg:  # headers, http2: none of them is implemented here, so none is accepted
        keys = ", ".join(sorted(map(str, http_cfg))) if isinstance(http_cfg, dict) else repr(http_cfg)
        raise BadInput(f"{path}: http_server_config ({keys}) is not supported by this exporter", _FIX)
    return WebConfig(
        tls=_tls(path, data.get("tls_server_config")),
        users=_users(path, data.get("basic_auth_users")),
        source=str(path),
    )


def _tls(path: str | Path, cfg: object) -> ssl.SSLContext | None:
    if not cfg:
        return None
    if not isinstance(cfg, dict):
        raise BadInput(f"{path}: tls_server_config must be a mapping", _FIX)
    unknown = set(cfg) - _TLS_KEYS
    if unknown:
        raise BadInput(f"{path}: unsupported tls_server_config key(s) {', '.join(sorted(unknown))}", _FIX)
    if not cfg.get("cert_file") or not cfg.get("key_file"):
        raise BadInput(f"{path}: tls_server_config needs cert_file and key_file", _FIX)
    base = Path(path).parent
    cert, key = (base / str(cfg["cert_file"]), base / str(cfg["key_file"]))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = _pick(path, "min_version", cfg.get("min_version", "TLS12"), _VERSIONS)
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise BadInput(f"{path}: cannot load the certificate {cert} / key {key}: {exc}", _FIX) from exc
    mode = _pick(path, "client_auth_type", cfg.get("client_auth_type", "NoClientCert"), _CLIENT_AUTH)
    if mode != ssl.CERT_NONE:
        ca = cfg.get("client_ca_file")
        if not ca:
            raise BadInput(f"{path}: client_auth_type {cfg['client_auth_type']} needs client_ca_file", _FIX)
        try:
            ctx.load_verify_locations(base / str(ca))
        except (OSError, ssl.SSLError) as exc:
            raise BadInput(f"{path}: cannot load client_ca_file {ca}: {exc}", _FIX) from exc
    ctx.verify_mode = mode
    return ctx


def _pick(path: str | Path, key: str, value: object, choices: Mapping[str, object]):
    if value not in choices:
        raise BadInput(f"{path}: {key} {value!r} is not one of {', '.join(choices)}", _FIX)
    return choices[value]  # type: ignore[index]


def _users(path: str | Path, cfg: object) -> dict[str, bytes]:
    if not cfg:
        return {}
    if not isinstance(cfg, dict):
        raise BadInput(f"{path}: basic_auth_users must map user names to bcrypt hashes", _FIX)
    out = {}
    for user, hashed in cfg.items():
        if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")):
            # A plain password here would be a secret in a file: refuse it, say how to hash one.
            raise BadInput(
                f"{path}: the password of basic_auth_users.{user} is not a bcrypt hash",
                'write its bcrypt hash: htpasswd -nBC 10 "" | tr -d \':\' (or python -c "import bcrypt; '
                "print(bcrypt.hashpw(b'PASSWORD', bcrypt.gensalt()).decode())\")",
            )
        if ":" in str(user):  # basic auth splits user and password at the first colon
            raise BadInput(f"{path}: basic_auth_users.{user}: a user name cannot hold ':'", _FIX)
        import bcrypt

        try:  # a damaged hash would start fine and then refuse every login
            bcrypt.checkpw(b"", hashed.encode())
        except ValueError:
            raise BadInput(
                f"{path}: the hash of basic_auth_users.{user} is not a valid bcrypt hash",
                "write it again: htpasswd -nBC 10 \"\" | tr -d ':'",
            ) from None
        out[str(user)] = hashed.encode()
    return out
