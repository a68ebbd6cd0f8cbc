"""labkit's JupyterHub: ``make hub`` runs ``jupyterhub -f deploy/hub/jupyterhub_config.py`` as root.

Everything variable lives in ``$HUB_STATE`` (default /var/lib/labkit-hub): the database, secrets
(made on first start), venvs, homes, hand-ins, feedback, grading runs, roster.csv, course.json.
Hub and proxy listen on 127.0.0.1 unless ``HUB_IP`` says otherwise; put TLS in front (docs/hosting.md).
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from labkit_hub import passback, paths, roster  # noqa: E402
from labkit_hub.spawner import LabkitSpawner  # noqa: E402

c = get_config()  # noqa: F821  (injected by jupyterhub)
st = paths.State.from_env()
st.make()
py = str(st.hub_venv / "bin" / "python")
service_env = {"HUB_STATE": str(st.root), "PYTHONPATH": str(Path(__file__).resolve().parent)}
for key in ("COURSE_PYTHON", "HUB_GRADING_JOBS", "HUB_AUTH", "LTI_ISSUER", "LTI_CLIENT_ID",
            "LTI_TOKEN_URL"):
    if key in os.environ:
        service_env[key] = os.environ[key]

# -- network: everything on loopback by default --------------------------------------------------
c.JupyterHub.bind_url = f"http://{paths.HUB_IP}:{paths.PROXY_PORT}"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{paths.HUB_API_PORT}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{paths.PROXY_API_PORT}"
c.ConfigurableHTTPProxy.command = [str(st.proxy / "node_modules" / ".bin" / "configurable-http-proxy")]
c.ConfigurableHTTPProxy.auth_token = st.secret("proxy_token")
c.JupyterHub.cookie_secret_file = str(st.secrets / "cookie_secret")
c.JupyterHub.db_url = f"sqlite:///{st.db}"
c.JupyterHub.pid_file = str(st.root / "jupyterhub.pid")
c.JupyterHub.cleanup_servers = True          # a hub restart ends the students' servers with it
c.JupyterHub.concurrent_spawn_limit = 30

# -- students' servers ---------------------------------------------------------------------------
c.JupyterHub.spawner_class = LabkitSpawner
c.Spawner.mem_limit = os.environ.get("HUB_MEM_LIMIT", "2G")
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
# ~/course is the student release, merged in by nbgitpuller on every start (spawner.py);
# the same nbgitpuller link (/hub/user-redirect/git-pull?repo=file:///srv/course&...) works too.
c.Spawner.default_url = "/lab/tree/course/notebooks/00_overview.ipynb"

# -- logins: the roster ----------------------------------------------------------------------------
LTI = "https://purl.imsglobal.org/spec/lti/claim/"
STAFF_ROLES = ("http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor",
               "http://purl.imsglobal.org/vocab/lis/v2/membership/Instructor#")   # and its sub-roles
lti = os.environ.get("HUB_AUTH", "native") == "lti"
if lti:
    if not os.environ.get("LTI_CONTEXT_ID"):
        raise SystemExit("HUB_AUTH=lti needs LTI_CONTEXT_ID: the LMS course (context id) this hub "
                         "serves; launches from other courses are refused")
    c.JupyterHub.authenticator_class = "ltiauthenticator.lti13.auth.LTI13Authenticator"
    c.LTI13Authenticator.issuer = os.environ["LTI_ISSUER"]
    c.LTI13Authenticator.client_id = [os.environ["LTI_CLIENT_ID"]]
    c.LTI13Authenticator.authorize_url = os.environ["LTI_AUTHORIZE_URL"]
    c.LTI13Authenticator.jwks_endpoint = os.environ["LTI_JWKS_URL"]
    c.LTI13Authenticator.username_key = "preferred_username"
    c.Authenticator.allow_all = True          # the course's membership in the LMS is the roster
    c.Authenticator.manage_groups = True      # course staff is a group, set again at every launch

    def lti_roles(authenticator, handler, authentication: dict) -> dict | None:
        """A launch from this course only; its Instructor roles (and sub-roles: TA) make course
        staff (the grading service), never hub admin; an LMS-wide Administrator is no staff."""
        claims = authentication.get("auth_state") or {}
        context = (claims.get(LTI + "context") or {}).get("id")
        if context != os.environ["LTI_CONTEXT_ID"]:
            authenticator.log.warning("LTI launch from context %r refused", context)
            return None
        roles = claims.get(LTI + "roles", [])
        staff = any(r == STAFF_ROLES[0] or r.startswith(STAFF_ROLES[1]) for r in roles)
        name = authentication["name"]
        # preferred_username is no unique id in OIDC: the name's first launch pins its LMS user
        # (iss, sub), and a roster staff name (hub admin, grading) comes only with an LMS
        # Instructor role, so a learner choosing an instructor's name gets nothing
        if name in roster.staff(st.roster) and not staff:     # (checked before pinning: a
            authenticator.log.warning("LTI launch as roster staff %r without an Instructor "
                                      "role refused", name)   # refused launch pins nothing)
            return None
        if not passback.pin_identity(st, name, claims):
            authenticator.log.warning("LTI launch as %r by another LMS user (sub %r) refused",
                                      name, claims.get("sub"))
            return None
        authentication["groups"] = ["course-staff"] if staff else []
        passback.remember_launch(st, name, claims)   # for score passback
        return authentication

    c.Authenticator.post_auth_hook = lti_roles
else:
    from nativeauthenticator import NativeAuthenticator

    c.JupyterHub.authenticator_class = roster.roster_authenticator(NativeAuthenticator)
    c.NativeAuthenticator.open_signup = False    # roster names are pre-authorised, others refused
    c.NativeAuthenticator.check_common_password = True
    c.NativeAuthenticator.minimum_password_length = 8
    c.NativeAuthenticator.allowed_failed_logins = 5     # then a name is locked for a while
    c.NativeAuthenticator.seconds_before_next_try = 300
    c.JupyterHub.template_vars = {"announcement_login": 'First time here? <a href="signup">Sign '
                                  'up</a> with the username on the class roster.'}
members = roster.load(st.roster)
staff = {m.username: m.role for m in members if m.role != "student"}
instructors = sorted(n for n, r in staff.items() if r == "instructor")
# a name whose role changed since the last start (demoted, removed, promoted) is logged out
# everywhere before the hub opens the database: its old sessions carried the old role
roster.end_sessions_at_start(st, members)

# -- roles: only instructors and TAs reach grading -------------------------------------------------
STAFF_SCOPES = ["access:services!service=grading", "access:services!service=handin",
                "list:users", "read:users", "read:servers", "admin-ui"]
c.JupyterHub.load_roles = [
    # the admin role listed here is exactly the roster's instructors: without it JupyterHub keeps
    # every admin the database had (jupyterhub/app.py, 6.1), so a demoted instructor stayed admin
    {"name": "admin", "users": instructors},
    {"name": "user", "scopes": ["self", "access:services!service=handin"]},
    {"name": "instructor", "users": instructors,
     "scopes": ["admin:users", "admin:servers", "access:services", "admin-ui", "list:users"]},
    {"name": "teaching-assistant", "users": sorted(n for n, r in staff.items() if r == "ta"),
     "scopes": STAFF_SCOPES},
    {"name": "idle-culler", "services": ["idle-culler"],
     "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"]},
    *([{"name": "course-staff", "groups": ["course-staff"], "scopes": STAFF_SCOPES}] if lti else []),
    {"name": "roster", "services": ["roster"],
     "scopes": ["admin:users", "admin:servers", "tokens", "list:users", "access:servers"]},
]

# -- services --------------------------------------------------------------------------------------
idle = os.environ.get("HUB_IDLE_TIMEOUT", "3600")
cull_every = os.environ.get("HUB_CULL_EVERY", "60")
c.JupyterHub.services = [
    {"name": "idle-culler",
     "command": [py, "-m", "jupyterhub_idle_culler", f"--timeout={idle}", f"--cull-every={cull_every}"]},
    {"name": "roster", "api_token": st.secret("roster_token")},     # `make hub-roster` uses it
    {"name": "handin", "display": True, "oauth_no_confirm": True,
     "url": f"http://127.0.0.1:{paths.HANDIN_PORT}", "environment": service_env,
     "command": [py, "-m", "labkit_hub.service", "handin"]},
    {"name": "grading", "display": True, "oauth_no_confirm": True,
     "url": f"http://127.0.0.1:{paths.GRADING_PORT}", "environment": service_env,
     "command": [py, "-m", "labkit_hub.service", "grading"]},
]
