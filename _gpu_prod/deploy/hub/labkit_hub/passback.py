"""LTI 1.3 score passback (Assignment and Grade Services) of a graded deadline, with pylti1p3.

Every LTI launch leaves the student's platform user id (``sub``) and the course's AGS endpoint in
``$HUB_STATE/lti/NAME.json`` (root-only; written by jupyterhub_config.py's post_auth_hook). ``send``
finds or creates the deadline's line item (tag = the deadline's name) and posts each graded
student's total as a Score. The tool's key pair is made on first use
(``secrets/lti_tool_key.pem``); the LMS's tool registration needs its public half:
``python -m labkit_hub.passback jwks`` prints it as a JSON Web Key Set.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import sys
from datetime import UTC, datetime

from labkit_hub.paths import NAME, State

AGS = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
SCORE_SCOPE = "https://purl.imsglobal.org/spec/lti-ags/scope/score"


def _record(state: State, name: str) -> dict | None:
    path = state.root / "lti" / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _write(state: State, name: str, record: dict) -> None:
    folder = state.root / "lti"
    folder.mkdir(mode=0o700, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(record, fh)
    tmp.replace(folder / f"{name}.json")


@contextlib.contextmanager
def _locked(state: State):
    """The launch records' lock (two launches of one name at once)."""
    folder = state.root / "lti"
    folder.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(folder / ".lock", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def pin_identity(state: State, name: str, claims: dict) -> bool:
    """The first launch under ``name`` pins its LMS user (``iss``, ``sub``: unique per OIDC, unlike
    the name); False for a later launch under ``name`` by another LMS user (refuse it)."""
    if not NAME.match(name) or not claims.get("sub") or not claims.get("iss"):
        return False
    with _locked(state):
        record = _record(state, name)
        if record is None:
            _write(state, name, {"sub": claims["sub"], "iss": claims["iss"]})
            return True
        return (record["sub"], record["iss"]) == (claims["sub"], claims["iss"])


def remember_launch(state: State, name: str, claims: dict) -> None:
    """Keep what passback needs from one launch of ``name``'s pinned LMS user: the AGS endpoint."""
    if not NAME.match(name) or AGS not in claims:
        return
    with _locked(state):
        record = _record(state, name)
        if record is not None and (record["sub"], record["iss"]) != (claims["sub"], claims["iss"]):
            raise ValueError(f"LTI launch for {name!r} by another LMS user: not recorded")
        _write(state, name, {"sub": claims["sub"], "iss": claims["iss"], "endpoint": claims[AGS]})


def tool_key(state: State) -> str:
    """The tool's private key (PEM), made on first use and kept root-only in the secrets."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    path = state.secrets / "lti_tool_key.pem"
    if not path.exists():
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(pem)
    return path.read_text()


def public_key(state: State) -> str:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(tool_key(state).encode(), None)
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def jwks(state: State) -> dict:
    """The tool's public key set, to paste into the LMS's registration of the tool."""
    from pylti1p3.registration import Registration

    return {"keys": [Registration.get_jwk(public_key(state))]}


def registration(state: State):
    """pylti1p3's Registration of this hub with the LMS (``LTI_*`` variables, the tool's key)."""
    from pylti1p3.registration import Registration

    missing = [k for k in ("LTI_ISSUER", "LTI_CLIENT_ID", "LTI_TOKEN_URL") if not os.environ.get(k)]
    if missing:
        raise ValueError(f"score passback needs {' '.join(missing)} (the LMS's tool registration)")
    return (Registration().set_issuer(os.environ["LTI_ISSUER"])
            .set_client_id(os.environ["LTI_CLIENT_ID"])
            .set_auth_token_url(os.environ["LTI_TOKEN_URL"])
            .set_tool_private_key(tool_key(state)).set_tool_public_key(public_key(state)))


def send(state: State, assignment: str) -> dict[str, str]:
    """Post each graded student's total to the deadline's line item; student -> what happened."""
    from pylti1p3.assignments_grades import AssignmentsGradesService
    from pylti1p3.exception import LtiException, LtiServiceException
    from pylti1p3.grade import Grade
    from pylti1p3.lineitem import LineItem
    from pylti1p3.service_connector import ServiceConnector

    from labkit_hub.grading import report

    rep = report(state, assignment)
    if not rep["students"]:
        raise ValueError(f"{assignment}: not graded yet")
    maximum = float(sum(t["points"] for t in rep["tasks"]))
    connector = ServiceConnector(registration(state))       # one access token for the run
    out, now = {}, datetime.now(UTC).isoformat(timespec="seconds")
    for s in rep["students"]:
        path = state.root / "lti" / f"{s['student']}.json"
        if not NAME.match(s["student"]) or not path.exists():
            out[s["student"]] = "no LTI launch: not sent"
            continue
        launch = json.loads(path.read_text())
        if "endpoint" not in launch:
            out[s["student"]] = "no launch with a grade service: not sent"
            continue
        if launch["iss"] != os.environ["LTI_ISSUER"] or SCORE_SCOPE not in launch["endpoint"].get("scope", []):
            out[s["student"]] = "this LMS gave no score scope: not sent"
            continue
        ags = AssignmentsGradesService(connector, launch["endpoint"])
        item = (LineItem().set_tag(assignment).set_label(f"labkit {assignment}")
                .set_score_maximum(maximum))
        grade = (Grade().set_score_given(float(s["total"])).set_score_maximum(maximum)
                 .set_user_id(launch["sub"]).set_timestamp(now).set_activity_progress("Completed")
                 .set_grading_progress("FullyGraded"))
        try:
            ags.put_grade(grade, item)
            out[s["student"]] = "sent"
        except LtiServiceException as exc:
            out[s["student"]] = f"refused by the LMS: {str(exc)[:200]}"
        except LtiException as exc:
            out[s["student"]] = f"not sent: {exc}"
    return out


def main(argv: list[str] | None = None) -> int:
    """``jwks``: print the tool's public keys; ``send DEADLINE``: post the graded totals."""
    ap = argparse.ArgumentParser(prog="python -m labkit_hub.passback", description=__doc__)
    ap.add_argument("command", choices=["jwks", "send"])
    ap.add_argument("assignment", nargs="?")
    args = ap.parse_args(argv)
    st = State.from_env()
    if args.command == "jwks":
        print(json.dumps(jwks(st), indent=1))
        return 0
    if not args.assignment:
        ap.error("send needs the deadline's name")
    try:
        results = send(st, args.assignment)
    except ValueError as exc:
        print(f"passback: {exc}", file=sys.stderr)
        return 2
    for student, what in results.items():
        print(f"{student}: {what}")
    return 0 if all(w == "sent" or w.startswith(("no LTI", "this LMS")) for w in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
