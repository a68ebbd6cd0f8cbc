"""A small fake LTI 1.3 platform on loopback, for tests/test_hub.py (runs in the hub's venv).

Serves its JSON Web Key Set at ``/jwks`` and an OIDC ``/authorize`` endpoint that answers the tool's
authentication request the way an LMS does: an auto-submitting form that POSTs a signed
``id_token`` (an LtiResourceLinkRequest for the user named by ``login_hint``, with the course's
Assignment and Grade Services endpoint) and ``state`` to the tool's ``redirect_uri``. For score
passback: ``/register`` takes the tool's public key set (what an admin pastes into an LMS),
``/token`` trades a client assertion signed with that key for a bearer token (OAuth 2 client
credentials), ``/lineitems`` lists and creates line items, ``/lineitems/N/scores`` takes scores;
``/received`` shows what arrived. Prints its port, then serves until killed.
"""

from __future__ import annotations

import html
import json
import sys
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

CLIENT_ID = "labkit-hub"
AGS = "https://purl.imsglobal.org/spec/lti-ags/"
TOOL_KEYS: list[dict] = []                  # the registered tool's public keys
TOKENS: set[str] = set()
LINEITEMS: list[dict] = []
SCORES: list[dict] = []
DEPLOYMENT = "deployment-1"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
KID = "fake-platform-key"
LTI = "https://purl.imsglobal.org/spec/lti/claim/"


def jwks() -> dict:
    """The platform's public key set."""
    key = json.loads(RSAAlgorithm.to_jwk(KEY.public_key()))
    return {"keys": [{**key, "kid": KID, "alg": "RS256", "use": "sig"}]}


def id_token(issuer: str, hint: str, nonce: str, target: str) -> str:
    """A signed launch for ``hint`` = ``user[=shown name][@context]`` (context ``course-1`` by
    default; the shown name is the preferred_username, the user's by default): an
    Instructor when the name starts with 'prof', a TA with 'ta', an LMS-wide Administrator (and
    a Learner in the course) with 'admin', else a Learner."""
    now = int(time.time())
    user, _, context = hint.partition("@")
    user, _, shown = user.partition("=")    # "mallory=prof": LMS user mallory, username "prof"
    role = {"prof": ["membership#Instructor"], "ta": ["membership/Instructor#TeachingAssistant"],
            "admin": ["institution/person#Administrator", "membership#Learner"]}.get(
        next((p for p in ("prof", "ta", "admin") if user.startswith(p)), ""), ["membership#Learner"])
    claims = {"iss": issuer, "aud": CLIENT_ID, "azp": CLIENT_ID, "sub": str(uuid.uuid5(uuid.NAMESPACE_DNS, user)),
              "exp": now + 300, "iat": now, "nonce": nonce, "preferred_username": shown or user,
              "name": user.title(), "email": f"{user}@example.edu",
              LTI + "message_type": "LtiResourceLinkRequest", LTI + "version": "1.3.0",
              LTI + "deployment_id": DEPLOYMENT, LTI + "target_link_uri": target,
              LTI + "resource_link": {"id": "labkit-course"},
              LTI + "roles": [f"http://purl.imsglobal.org/vocab/lis/v2/{r}" for r in role],
              LTI + "context": {"id": context or "course-1", "label": "TC101", "title": "torch.compile"},
              AGS + "claim/endpoint": {"scope": [AGS + "scope/lineitem", AGS + "scope/score",
                                                 AGS + "scope/result.readonly"],
                                       "lineitems": f"{issuer}/lineitems"}}
    return jwt.encode(claims, KEY, algorithm="RS256", headers={"kid": KID})


class Platform(BaseHTTPRequestHandler):
    def authorized(self) -> bool:
        return self.headers.get("Authorization", "").removeprefix("Bearer ") in TOKENS

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        path, issuer = urlparse(self.path).path, f"http://127.0.0.1:{self.server.server_port}"
        if path == "/register":
            TOOL_KEYS[:] = json.loads(body)["keys"]
            return self.reply(200, "application/json", "{}")
        if path == "/token":
            form = {k: v[0] for k, v in parse_qs(body).items()}
            try:
                kid = jwt.get_unverified_header(form["client_assertion"]).get("kid")
                key = next(RSAAlgorithm.from_jwk(json.dumps(k)) for k in TOOL_KEYS if k.get("kid") == kid)
                claims = jwt.decode(form["client_assertion"], key, algorithms=["RS256"],
                                    audience=f"{issuer}/token")
                assert claims["iss"] == claims["sub"] == CLIENT_ID
            except Exception as exc:   # noqa: BLE001  (any bad assertion: 401, as a platform does)
                return self.reply(401, "application/json", json.dumps({"error": repr(exc)[:200]}))
            token = uuid.uuid4().hex
            TOKENS.add(token)
            return self.reply(200, "application/json", json.dumps(
                {"access_token": token, "token_type": "Bearer", "expires_in": 3600, "scope": form["scope"]}))
        if not self.authorized():
            return self.reply(401, "text/plain", "no bearer token")
        if path == "/lineitems":
            item = {**json.loads(body), "id": f"{issuer}/lineitems/{len(LINEITEMS) + 1}"}
            LINEITEMS.append(item)
            return self.reply(201, "application/vnd.ims.lis.v2.lineitem+json", json.dumps(item))
        if path.startswith("/lineitems/") and path.endswith("/scores"):
            SCORES.append({**json.loads(body), "lineitem": path.removesuffix("/scores")})
            return self.reply(200, "application/json", "{}")
        self.reply(404, "text/plain", "no such page")

    def do_GET(self) -> None:   # noqa: N802
        url = urlparse(self.path)
        if url.path == "/jwks":
            return self.reply(200, "application/json", json.dumps(jwks()))
        if url.path == "/received":
            return self.reply(200, "application/json", json.dumps({"lineitems": LINEITEMS, "scores": SCORES}))
        if url.path == "/lineitems":
            if not self.authorized():
                return self.reply(401, "text/plain", "no bearer token")
            return self.reply(200, "application/vnd.ims.lis.v2.lineitemcontainer+json", json.dumps(LINEITEMS))
        if url.path != "/authorize":
            return self.reply(404, "text/plain", "no such page")
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        if q.get("client_id") != CLIENT_ID or "redirect_uri" not in q:
            return self.reply(400, "text/plain", "bad authentication request")
        issuer = f"http://127.0.0.1:{self.server.server_port}"
        token = id_token(issuer, q["login_hint"], q["nonce"], q["redirect_uri"])
        form = (f'<form id=launch method=post action="{html.escape(q["redirect_uri"])}">'
                f'<input type=hidden name=id_token value="{token}">'
                f'<input type=hidden name=state value="{html.escape(q["state"])}"></form>'
                "<script>document.getElementById('launch').submit()</script>")
        self.reply(200, "text/html", form)

    def reply(self, status: int, kind: str, body: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args) -> None:
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0), Platform)
    print(server.server_port, flush=True)
    server.serve_forever()
