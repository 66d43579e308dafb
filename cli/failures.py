"""Exit codes of every ``cronstream`` command, and the one line each failure is said in.

The codes are defined here once (``EXITS``; docs/operations.md prints the table and a unit test
keeps the two the same) so a script can tell "fix the input" (2), "try again once it is up" (3)
and "fix the settings" (4) apart. A command that cannot reach what it needs (Kafka, the API,
Kafka Connect, PostgreSQL, SES) or is refused by it says so in one line, never a traceback:
what it tried (the address and the way it spoke: protocol, mechanism, TLS mode), the cause
(refused, timed out, authentication failed, certificate not trusted) and the next step. Kafka's
lines are the workers' own (``streams.runtime.admin``: ``check_reachable``, ``diagnose``); the
others are made here from the client libraries' errors (``http_failure``, ``postgres_failure``,
``ses_failure``) and ``explain`` turns whatever a command raised into its line and code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.runtime.kafka_config import KafkaSecurity


@dataclass(frozen=True)
class Exit:
    code: int
    name: str
    meaning: str


OK, FAILED, USAGE, UNREACHABLE, DENIED = 0, 1, 2, 3, 4
EXITS = (
    Exit(OK, "done", "the command did what it says"),
    Exit(FAILED, "refused or failed", "the API refused the request (the message names the field, "
         "e.g. `HTTP 422: schedule.cron: ...`), the broker refused a write, or the command "
         "failed (a component of `stack up` did not start, `campaigns watch` gave up)"),
    Exit(USAGE, "usage", "bad usage, an unreadable input file, or a setting that cannot work "
         "(`config check`'s problems; the message names the variable)"),
    Exit(UNREACHABLE, "unreachable", "Kafka, the API, Kafka Connect, PostgreSQL or SES could not "
         "be reached: connection refused, timed out, host name not resolved; run it again once "
         "that is up"),
    Exit(DENIED, "denied", "reached, but it refused this client: authentication failed (password, "
         "API key, token), a certificate not trusted or refused, another protocol expected, "
         "not authorized; fix the settings: running it again will not help"),
)


class CliError(Exception):
    """A failure the CLI reports in one line and turns into ``code`` (``EXITS``)."""

    def __init__(self, message: str, code: int = FAILED) -> None:
        super().__init__(message)
        self.code = code


def one_line(text: str) -> str:
    """``text`` with its line breaks and runs of blanks made single spaces."""
    return " ".join(str(text).split())


def markdown_table() -> str:
    """``EXITS`` as the table of docs/operations.md."""
    return "\n".join(["| exit code | | what happened |", "|---|---|---|",
                      *(f"| {e.code} | {e.name} | {e.meaning} |" for e in EXITS)])


# -- HTTP: the API, Kafka Connect -------------------------------------------------------------------
_NO_NAME = ("name or service not known", "temporary failure in name resolution",
            "nodename nor servname", "no address associated")


def http_failure(service: str, url: str, exc: Exception, next_step: str) -> CliError:
    """``exc`` (an httpx transport error) calling ``service`` at ``url``, in one line."""
    import httpx

    text = one_line(str(exc)) or type(exc).__name__
    lowered = text.lower()
    here = f"{service} at {url}"
    if "certificate verify failed" in lowered or "ssl" in lowered and "certificate" in lowered:
        return CliError(f"{here}: TLS handshake failed, its certificate is not trusted or does "
                        f"not name the host: {text}", DENIED)
    if isinstance(exc, httpx.TimeoutException):
        return CliError(f"{here}: timed out ({next_step}): {text}", UNREACHABLE)
    if "connection refused" in lowered:
        return CliError(f"{here}: connection refused: nothing listens there ({next_step}): {text}",
                        UNREACHABLE)
    if any(words in lowered for words in _NO_NAME):
        return CliError(f"{here}: the host name does not resolve ({next_step}): {text}",
                        UNREACHABLE)
    return CliError(f"{here}: cannot be reached ({next_step}): {text}", UNREACHABLE)


# -- PostgreSQL --------------------------------------------------------------------------------
_PG_DENIED = ("password authentication failed", "no pg_hba.conf entry", "authentication failed",
              "does not exist", "permission denied", "password is required", "no password supplied")
_PG_TLS = ("certificate verify failed", "root certificate", "ssl error", "ssl syscall",
           "server does not support ssl", "sslmode value")


def postgres_where(params: dict[str, str]) -> str:
    """What a PostgreSQL client tried: its address, TLS mode and user (never the password)."""
    return (f"postgresql at {params.get('host') or 'localhost'}:{params.get('port') or 5432} "
            f"(sslmode {params.get('sslmode', 'prefer')}, user {params.get('user') or '-'}, "
            f"database {params.get('dbname') or '-'})")


def postgres_failure(params: dict[str, str], exc: Exception) -> CliError:
    """``exc`` (psycopg's ``OperationalError``) connecting with ``params``, in one line: libpq's
    first words, without its multi-line hints."""
    text = one_line(str(exc).split("\n")[0]) or type(exc).__name__
    lowered = str(exc).lower()
    here = postgres_where(params)
    if any(words in lowered for words in _PG_TLS):
        return CliError(f"{here}: TLS failed, the server's certificate is not trusted or TLS is "
                        f"not offered (check CRONSTREAM_PG_SSLMODE and _SSLROOTCERT): {text}",
                        DENIED)
    if any(words in lowered for words in _PG_DENIED):
        return CliError(f"{here}: authentication failed or refused (check CRONSTREAM_PG_USER, "
                        f"_PASSWORD, _DATABASE or CRONSTREAM_PG_DSN): {text}", DENIED)
    if "timeout expired" in lowered or "timed out" in lowered:
        return CliError(f"{here}: timed out (check CRONSTREAM_PG_HOST/_PORT or CRONSTREAM_PG_DSN, "
                        f"and the network): {text}", UNREACHABLE)
    if "connection refused" in lowered:
        return CliError(f"{here}: connection refused: nothing listens there (is it up? on the "
                        f"local stack: cronstream stack status; else check CRONSTREAM_PG_HOST/"
                        f"_PORT or CRONSTREAM_PG_DSN): {text}", UNREACHABLE)
    if "could not translate host name" in lowered:
        return CliError(f"{here}: the host name does not resolve (check CRONSTREAM_PG_HOST or "
                        f"CRONSTREAM_PG_DSN): {text}", UNREACHABLE)
    return CliError(f"{here}: cannot be used: {text}", UNREACHABLE)


# -- SES ---------------------------------------------------------------------------------------
_SES_DENIED = ("UnrecognizedClientException", "InvalidClientTokenId", "SignatureDoesNotMatch",
               "AccessDenied", "AccessDeniedException", "ExpiredToken", "InvalidSignatureException",
               "IncompleteSignature", "MissingAuthenticationToken")


def ses_failure(where: str, exc: Exception) -> CliError:
    """``exc`` (botocore's) calling SES at ``where``, in one line: no credentials is a setting
    (2), a refused signature or key is denied (4), no answer is unreachable (3), any other
    refusal is SES's own (1)."""
    from botocore.exceptions import (
        ClientError,
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
        ReadTimeoutError,
        SSLError,
    )

    text = one_line(str(exc))
    here = f"ses at {where}"
    if isinstance(exc, NoCredentialsError):
        return CliError(f"{here}: no AWS credentials (set AWS_ACCESS_KEY_ID and "
                        f"AWS_SECRET_ACCESS_KEY, or a profile or role)", USAGE)
    if isinstance(exc, SSLError):
        return CliError(f"{here}: TLS handshake failed: {text}", DENIED)
    if isinstance(exc, ConnectTimeoutError | ReadTimeoutError):
        return CliError(f"{here}: timed out (check CRONSTREAM_SES_ENDPOINT and the network): "
                        f"{text}", UNREACHABLE)
    if isinstance(exc, EndpointConnectionError):
        cause = ("connection refused: nothing listens there" if "refused" in
                 str(exc.kwargs.get("error", "")).lower() else "cannot be reached")
        return CliError(f"{here}: {cause} (is it up? check CRONSTREAM_SES_ENDPOINT): {text}",
                        UNREACHABLE)
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "")
        if code in _SES_DENIED:
            return CliError(f"{here}: refused the credentials ({code}; check the AWS "
                            f"credentials and AWS_REGION): {text}", DENIED)
        return CliError(f"{here}: SES refused the request: {text}", FAILED)
    return CliError(f"{here}: {text}", FAILED)


# -- Kafka, after the connection was made (``streams.runtime.admin.check_reachable`` before) -----
_KAFKA_DENIED = ("TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED",
                 "CLUSTER_AUTHORIZATION_FAILED", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
                 "_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "_SSL")
_KAFKA_GONE = ("_TRANSPORT", "_TIMED_OUT", "_ALL_BROKERS_DOWN", "_MSG_TIMED_OUT",
               "REQUEST_TIMED_OUT", "NETWORK_EXCEPTION", "COORDINATOR_NOT_AVAILABLE",
               "NOT_COORDINATOR", "LEADER_NOT_AVAILABLE", "_RESOLVE", "_WAIT_COORD")


def kafka_failure(bootstrap: str, exc: Any) -> CliError:
    """A librdkafka error (``KafkaException``) met once the command had connected: a broker gone
    or silent is unreachable, a missing ACL denied, anything else the broker's refusal."""
    from streams.runtime.admin import where

    error = exc.args[0] if exc.args else None
    name = error.name() if hasattr(error, "name") else ""
    text = one_line(error.str() if hasattr(error, "str") else str(exc))
    here = where(bootstrap, KafkaSecurity.from_env())
    if name in _KAFKA_DENIED:
        return CliError(f"{here}: not allowed ({name}; the principal needs the ACLs of "
                        f"docs/deploy.md): {text}", DENIED)
    if name in _KAFKA_GONE:
        return CliError(f"{here}: stopped answering ({name}; is the broker up? on the local "
                        f"stack: cronstream stack status): {text}", UNREACHABLE)
    return CliError(f"{here}: refused ({name}): {text}", FAILED)


def explain(exc: BaseException, bootstrap: str | None = None) -> CliError | None:
    """The line and code of a failure a command raised, or None for one no rule here knows (the
    caller says it is unexpected). Settings that cannot work are usage (2); Kafka met before or
    during the command is said as ``streams.runtime.admin`` says it; the API, Kafka Connect and
    PostgreSQL as above, named from the settings."""
    import httpx
    import psycopg
    from confluent_kafka import KafkaException

    from streams.runtime import settings
    from streams.runtime.admin import KafkaUnreachable

    if isinstance(exc, CliError):
        return exc
    if isinstance(exc, KafkaUnreachable):
        return CliError(str(exc), DENIED if exc.denied else UNREACHABLE)
    if isinstance(exc, SystemExit) and isinstance(exc.code, str):  # a setting that cannot work
        return CliError(exc.code, USAGE)
    if isinstance(exc, KafkaException) and bootstrap is not None:
        return kafka_failure(bootstrap, exc)
    if isinstance(exc, psycopg.OperationalError):
        return postgres_failure(settings.load().pg_params, exc)
    if isinstance(exc, httpx.TransportError):
        conf = settings.load()
        url = str(exc.request.url)
        named = {conf.api_url: ("the API", API_NEXT_STEP),
                 conf.connect_url: ("Kafka Connect", CONNECT_NEXT_STEP)}
        service, next_step = next((v for base, v in named.items() if url.startswith(base)),
                                  ("http", "is it up?"))
        return http_failure(service, url, exc, next_step)
    return None


API_NEXT_STEP = ("is the API up? on the local stack: cronstream stack status; else check "
                 "--api-url or CRONSTREAM_API_URL")
CONNECT_NEXT_STEP = ("is Kafka Connect up? on the local stack: cronstream stack status; else "
                     "check --connect-url or CRONSTREAM_CONNECT_URL")
