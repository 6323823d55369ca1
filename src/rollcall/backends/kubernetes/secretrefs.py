"""The values of ``--workload-secret`` for a run's Secret: from the suite's environment, or another Secret.

A ``NAME=NAMESPACE/SECRET/KEY`` is read from that Secret, which the suite's identities may ``get`` by name
only where a Role of that namespace grants it (``resourceNames``; the ClusterRole reads no Secret: see
``docs/security.md``). The value goes into the run's own Secret and nowhere else; a message about it names
the Secret and its key, never its value.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from kubernetes.client.exceptions import ApiException

from rollcall.backends import BackendError
from rollcall.backends.kubernetes.kube import Kube, call, message_of
from rollcall.secrets import FromEnvironment, FromSecret, SecretSource


def read_values(
    kube: Kube, sources: Mapping[str, SecretSource], environ: Mapping[str, str]
) -> dict[str, str]:
    """The value of each variable of ``sources``, by name.

    Raises:
        BackendError: a variable missing from ``environ``, a Secret the suite may not read or that does not
            hold the key: naming it and the fix.
    """
    values: dict[str, str] = {}
    secrets: dict[tuple[str, str], dict[str, str]] = {}
    for name, source in sources.items():
        if isinstance(source, FromEnvironment):
            if name not in environ:
                raise BackendError(
                    f"--workload-secret {name}: the suite's environment has no {name}; set it (from the CI's "
                    f"secret store), or name a Kubernetes Secret: --workload-secret "
                    f"{name}=NAMESPACE/SECRET/KEY"
                )
            values[name] = environ[name]
            continue
        assert isinstance(source, FromSecret)
        where = (source.namespace, source.secret)
        if where not in secrets:
            secrets[where] = _data(kube, name, source)
        data = secrets[where]
        if source.key not in data:
            raise BackendError(
                f"--workload-secret {name}={source}: the Secret {source.namespace}/{source.secret} has no "
                f"key {source.key!r} (its keys: {', '.join(sorted(data)) or 'none'})"
            )
        values[name] = data[source.key]
    return values


def _data(kube: Kube, name: str, source: FromSecret) -> dict[str, str]:
    """The keys and decoded values of ``source``'s Secret."""
    try:
        secret = call(kube.core.read_namespaced_secret, source.secret, source.namespace)
    except ApiException as exc:
        if exc.status == 403:
            raise BackendError(
                f"--workload-secret {name}={source}: the suite may not read the Secret "
                f"{source.namespace}/{source.secret} ({message_of(exc)}); create the Role and RoleBinding of "
                f"docs/security.md (Secrets by reference) in {source.namespace}, naming that Secret alone"
            ) from None
        if exc.status == 404:
            raise BackendError(
                f"--workload-secret {name}={source}: there is no Secret {source.namespace}/{source.secret}"
            ) from None
        raise
    try:
        return {
            key: base64.b64decode(text, validate=True).decode()
            for key, text in (secret.get("data") or {}).items()
        }
    except (binascii.Error, UnicodeDecodeError):
        raise BackendError(
            f"--workload-secret {name}={source}: a value of the Secret {source.namespace}/{source.secret} is "
            "not text; an environment variable holds text only"
        ) from None
