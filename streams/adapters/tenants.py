"""Tenants and their API keys. A key is shown once, at creation; only its SHA-256 is stored.

What a tenant may send mail as, and through which IP pools, is the operator's grant, kept on its
record (``senders``, ``pools``): the SES account is shared, so without it any tenant could send
in another's name, or through another's dedicated IPs and reputation (issue 40). The rule is
``mail_refused``, applied by the API at creation and by the walkers and the executor at each send.
Text messages likewise (issue 45): the End User Messaging SMS account is shared too, and a
tenant's reminder leaves only from an origination identity the operator granted it
(``sms_originations``, the rule ``sms_refused``), or none would stop it sending as another
tenant's short code or sender id.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from email.utils import parseaddr
from typing import Any

from streams.adapters import sms_text
from streams.records import Tenant
from streams.runtime.clock import now_ms

NAME = re.compile(r"^[a-z][a-z0-9-]{1,39}$")
# names a tenant may not take: ``cronstream`` owns the ``cronstream.`` topics (a Kafka target
# writes ``<tenant>.*``, so a tenant of that name could write the jobs or ledger topics), and the
# console shows the operator's session as ``operator``
RESERVED = frozenset({"cronstream", "operator"})
RESERVED_PREFIX = "cronstream"
KEY_PREFIX = "cs_"
POOL = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
DEFAULT_POOL = "default"  # the account's shared IPs: every tenant's
DOMAIN = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")
CONFIGURATION_SET_MAX = 64  # SES's limit on a configuration set's name
# the schema's default of ``max_fires_per_s``: high enough not to hold a tenant on one box; also
# the executor's rate for a tenant whose record it has not read
DEFAULT_FIRES_PER_S = 10_000
# the grant that lets a tenant's text omit its origination: AWS then picks one of the *account's*
# identities (any tenant's number or sender id in a shared account), so it is the operator's
# explicit grant, never implied by another (a tenant granted its own number could otherwise send
# from whatever AWS picks). Not an origination itself: 15 characters, longer than a sender id.
SMS_ACCOUNT_DEFAULT = "account-default"
LIMITS = ("max_jobs", "max_campaigns", "max_recipients", "max_suppressions", "requests_per_s",
          "min_interval_s", "max_fires_per_s")


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a tenant's, or None."""
    if not NAME.match(name):
        return ("name: tenant name must be 2-40 characters: lowercase letters, digits, '-', "
                "starting with a letter")
    if name in RESERVED or name.startswith(RESERVED_PREFIX):
        return f"name: {name!r} is reserved (cronstream's own topics and the operator)"
    return None


def sender_problem(identity: str) -> str | None:
    """Why ``identity`` cannot be granted as a sender: an address or a domain."""
    local, at, domain = identity.lower().rpartition("@")
    if at and not local:
        return f"sender {identity!r}: an address has a local part before the '@'"
    if not DOMAIN.match(domain):
        return f"sender {identity!r} is neither an email address nor a domain"
    return None


def pool_problem(tenant: str, pool: str) -> str | None:
    """Why ``pool`` cannot be granted to ``tenant``: its name, or the configuration set it makes
    (``streams.adapters.ses.configuration_set``) longer than SES allows."""
    if not POOL.match(pool):
        return f"ip pool {pool!r}: 1-64 of A-Z a-z 0-9 _ -"
    if len(f"cronstream-{tenant}_{pool}") > CONFIGURATION_SET_MAX:
        return (f"ip pool {pool!r}: its configuration set cronstream-{tenant}_{pool} is longer "
                f"than SES's {CONFIGURATION_SET_MAX} characters")
    return None


def pools_of(tenant: Tenant) -> set[str]:
    """The IP pools the tenant may send through: the shared one, those granted, those with a
    warm-up plan."""
    return {DEFAULT_POOL, *tenant.get("pools", []), *tenant.get("ip_pools", {})}


def sender_granted(tenant: Tenant, sender: str) -> bool:
    """Whether ``sender`` (``a@b`` or ``Name <a@b>``) is a granted address, or at a granted
    domain (that domain exactly: a subdomain is another identity)."""
    address = (parseaddr(sender)[1] or sender).strip().lower()
    domain = address.rpartition("@")[2]
    granted = {g.lower() for g in tenant.get("senders", [])}
    return bool(address) and "@" in address and (address in granted or domain in granted)


def mail_refused(tenant: dict[str, Any] | None, sender: str, pool: str | None = None
                 ) -> tuple[str, str] | None:
    """(field, why) when the tenant may not send as ``sender`` (through ``pool``), else None."""
    if not tenant:
        return "tenant", "unknown tenant"
    if not sender_granted(tenant, sender):
        return "from", (f"{sender} is not one of tenant {tenant['tenant']}'s senders (verified "
                        "identities the operator grants: cronstream tenant update --sender)")
    if pool is not None and pool not in pools_of(tenant):
        return "ip_pool", (f"ip pool {pool} is not one of tenant {tenant['tenant']}'s pools "
                           "(cronstream tenant update --pool)")
    return None


def sms_origination_checked(identity: str) -> str:
    """``identity`` as it is granted (a phone number in E.164, ``sms_text.check_origination``),
    or ``SMS_ACCOUNT_DEFAULT``; ValueError naming it otherwise."""
    if identity == SMS_ACCOUNT_DEFAULT:
        return identity
    try:
        return sms_text.check_origination(identity)
    except ValueError as exc:
        raise ValueError(f"sms origination {identity!r}: {exc} (or {SMS_ACCOUNT_DEFAULT}, the "
                         "account's own choice)") from exc


def sms_refused(tenant: dict[str, Any] | None, origination: str | None) -> tuple[str, str] | None:
    """(field, why) when the tenant may not send a text from ``origination`` (None: the
    account's default, which needs the grant ``SMS_ACCOUNT_DEFAULT``), else None. Exact match
    of what was granted (a phone number both sides normalise to E.164): the id of a resource and
    its ARN are two grants, as AWS would not tell us they name the same number."""
    if not tenant:
        return "tenant", "unknown tenant"
    granted = set(tenant.get("sms_originations", []))
    if origination is None:
        if SMS_ACCOUNT_DEFAULT in granted:
            return None
        return "origination", (f"tenant {tenant['tenant']} may not send from the account's "
                               "default origination: name one of its granted originations "
                               f"({', '.join(sorted(granted)) or 'none granted'}; cronstream "
                               f"tenant update --sms-origination {SMS_ACCOUNT_DEFAULT} allows it)")
    if origination not in granted:
        return "origination", (f"{origination} is not one of tenant {tenant['tenant']}'s SMS "
                               "originations (identities the operator grants: cronstream "
                               "tenant update --sms-origination)")
    return None


def key_hash(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def checked_grants(name: str, senders: list[str], pools: list[str],
                   sms_originations: Sequence[str] = ()) -> list[str]:
    """ValueError naming the first sender, pool or SMS origination that cannot be granted; the
    originations as granted (normalised) otherwise."""
    for problem in [*map(sender_problem, senders), *(pool_problem(name, p) for p in pools)]:
        if problem:
            raise ValueError(problem)
    return [sms_origination_checked(o) for o in sms_originations]


def limits_checked(limits: dict[str, int]) -> None:
    """ValueError naming a limit that is not one, or a fires-per-second quota below 1 (a tenant
    held to none would never run; removing a tenant's runs is deleting its jobs)."""
    unknown = set(limits) - set(LIMITS)
    if unknown:
        raise ValueError(f"not a tenant limit: {', '.join(sorted(unknown))}")
    if limits.get("max_fires_per_s", 1) < 1:
        raise ValueError(f"max_fires_per_s: must be at least 1, got {limits['max_fires_per_s']}")


def new_tenant(name: str, allowed_targets: list[str] | None = None, max_jobs: int = 100_000,
               min_interval_s: int = 1, requests_per_s: int = 100,
               ip_pools: dict[str, dict[str, Any]] | None = None,
               senders: list[str] | None = None, pools: list[str] | None = None,
               max_campaigns: int = 1000, max_recipients: int = 50_000_000,
               max_suppressions: int = 10_000_000,
               max_fires_per_s: int = DEFAULT_FIRES_PER_S,
               sms_originations: list[str] | None = None) -> tuple[dict[str, Any], str]:
    """A Tenant record (schemas/tenant.avsc) and the API key that authenticates as it."""
    if (problem := name_problem(name)) is not None:
        raise ValueError(problem)
    limits_checked({"max_fires_per_s": max_fires_per_s})
    originations = checked_grants(name, list(senders or []),
                                  [*(pools or []), *(ip_pools or {})], sms_originations or [])
    api_key = KEY_PREFIX + secrets.token_urlsafe(32)
    record = {
        "tenant": name, "key_sha256": key_hash(api_key),
        "allowed_targets": list(allowed_targets or []), "max_jobs": max_jobs,
        "min_interval_s": min_interval_s, "requests_per_s": requests_per_s,
        "ip_pools": dict(ip_pools or {}), "senders": list(senders or []),
        "pools": list(pools or []), "max_campaigns": max_campaigns,
        "max_recipients": max_recipients, "max_suppressions": max_suppressions,
        "max_fires_per_s": max_fires_per_s,
        "sms_originations": list(dict.fromkeys(originations)), "created_ms": now_ms(),
    }
    return record, api_key


def write(bootstrap: str, record: dict[str, Any], partitions: int) -> None:
    """Write ``record`` to the tenants topic, acknowledged; the cluster's topics are made
    first where missing, each of ``partitions`` (``Settings.partitions``) unless it declares its
    own count, so a tenant can be created on an empty cluster before any worker started."""
    from streams.runtime import admin
    from streams.runtime.codec import codec
    from streams.runtime.emit import Emitter
    from streams.topology import TENANTS

    admin.ensure_topics(bootstrap, partitions=partitions)
    emitter = Emitter(bootstrap, "cronstream-tenants")
    try:
        emitter.produce(TENANTS, record["tenant"], codec().encode("Tenant", record))
        if emitter.flush(30):
            raise RuntimeError("the broker did not acknowledge the tenant record")
    finally:
        emitter.close()


def create(bootstrap: str, name: str, *, partitions: int, **options: Any) -> str:
    """Write a new tenant (or a new key for an existing one) to the tenants topic; returns the key."""
    record, api_key = new_tenant(name, **options)
    write(bootstrap, record, partitions)
    return api_key


def granted(record: dict[str, Any], grant_senders: Sequence[str] = (),
            revoke_senders: Sequence[str] = (), grant_pools: Sequence[str] = (),
            revoke_pools: Sequence[str] = (), grant_sms_originations: Sequence[str] = (),
            revoke_sms_originations: Sequence[str] = (), **limits: int) -> dict[str, Any]:
    """``record`` with senders, pools and SMS originations granted or revoked and limits set
    (pure); its key, allow-list and warm-up plans unchanged. ValueError naming what cannot be
    granted. A phone number is revoked as it was granted, whatever its spacing (E.164)."""
    added = checked_grants(record["tenant"], list(grant_senders), list(grant_pools),
                           grant_sms_originations)
    gone = {_granted_form(o) for o in revoke_sms_originations}
    originations = [o for o in record.get("sms_originations", []) if o not in gone]
    originations += [o for o in dict.fromkeys(added) if o not in originations]
    revoked_s = {s.lower() for s in revoke_senders}
    senders = [s for s in record.get("senders", []) if s.lower() not in revoked_s]
    senders += [s for s in grant_senders if s.lower() not in {x.lower() for x in senders}]
    pools = [p for p in record.get("pools", []) if p not in set(revoke_pools)]
    pools += [p for p in grant_pools if p not in pools]
    limits_checked(limits)
    return {**record, "senders": senders, "pools": pools, "sms_originations": originations,
            **limits}


def _granted_form(identity: str) -> str:
    """How ``identity`` was granted (E.164 for a number), or itself when it is not valid: a
    revocation never fails on what could not have been granted."""
    try:
        return sms_origination_checked(identity)
    except ValueError:
        return identity


def update(bootstrap: str, name: str, *, partitions: int, **changes: Any) -> dict[str, Any]:
    """Grant or revoke senders, pools and SMS originations, or set limits, on an existing tenant
    (``granted``), keeping its key; returns the record written. LookupError when there is no
    such tenant."""
    from streams.runtime.topic_view import TopicView
    from streams.topology import TENANTS

    view = TopicView(bootstrap, TENANTS).start()
    try:
        current = view.get(name)
    finally:
        view.stop()
    if current is None:
        raise LookupError(f"no tenant {name!r}")
    record = granted(current, **changes)
    write(bootstrap, record, partitions)
    return record
