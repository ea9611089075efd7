"""Student pages through Flask's test client: login, CSRF, upload form, feedback page."""

from __future__ import annotations

import io
import re
from collections.abc import Callable

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy.engine import Engine

from grader.db.engine import session_scope
from grader.db.tables import Role
from grader.db.users import get_user_by_name, rotate_token
from tests.server.conftest import Account, agent_files, make_zip

REFUSE_ALL = """
def answer(question):
    return {"answer": "I don't know.", "citations": [], "confidence": 0.1,
            "needs_human_review": True}
"""


def csrf_token(client: FlaskClient, path: str = "/login") -> str:
    html = client.get(path).get_data(as_text=True)
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, html
    return match.group(1)


def logged_in(app: Flask, account: Account) -> FlaskClient:
    browser = app.test_client()
    response = browser.post(
        "/login", data={"token": account.token, "csrf_token": csrf_token(browser)}
    )
    assert response.status_code == 302, response.get_data(as_text=True)
    return browser


def test_pages_need_a_login(client: FlaskClient) -> None:
    """Anonymous visitors are sent to the login form, keeping where they were going."""
    response = client.get("/submissions")
    assert response.status_code == 302
    assert response.headers["Location"].startswith("/login?next=")
    assert client.get("/").headers["Location"] == "/login"


def test_login_checks_csrf_and_token(app: Flask, student: Account) -> None:
    """A login POST needs the form's CSRF token and a valid token; then it sets a session."""
    browser = app.test_client()
    assert browser.post("/login", data={"token": student.token}).status_code == 400
    bad = browser.post("/login", data={"token": "grd_nope", "csrf_token": csrf_token(browser)})
    assert bad.status_code == 401 and "not valid" in bad.get_data(as_text=True)
    good = browser.post(
        "/login?next=/submissions",
        data={"token": student.token, "csrf_token": csrf_token(browser)},
    )
    assert good.status_code == 302 and good.headers["Location"] == "/submissions"
    cookie = good.headers["Set-Cookie"]
    assert "grader_session=" in cookie and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    assert student.token not in cookie
    assert browser.get("/submissions").status_code == 200


def test_login_never_redirects_off_site(app: Flask, student: Account) -> None:
    """The `next` parameter only accepts same-site paths."""
    browser = app.test_client()
    for target in ("//evil.example/x", "https://evil.example/", "javascript:alert(1)"):
        response = browser.post(
            f"/login?next={target}",
            data={"token": student.token, "csrf_token": csrf_token(browser)},
        )
        assert response.headers["Location"] == "/submissions"


def test_upload_form_queues_and_feedback_page_shows_results(
    app: Flask, student: Account, run_worker_burst: Callable[[], None]
) -> None:
    """The form upload (with CSRF) redirects to the feedback page, which shows the decision,
    per-gate counts and hints once a real worker has graded it."""
    browser = logged_in(app, student)
    no_csrf = browser.post(
        "/submissions", data={"package": (io.BytesIO(b"x"), "a.zip")}, follow_redirects=False
    )
    assert no_csrf.status_code == 400
    response = browser.post(
        "/submissions",
        data={
            "csrf_token": csrf_token(browser, "/submissions"),
            "package": (io.BytesIO(make_zip(agent_files(REFUSE_ALL, name="refuser"))), "r.zip"),
        },
    )
    assert response.status_code == 302
    page_url = response.headers["Location"]
    queued = browser.get(page_url).get_data(as_text=True)
    assert "queued for grading" in queued and "status-queued" in queued
    run_worker_burst()
    html = browser.get(page_url).get_data(as_text=True)
    assert "status-graded" in html
    assert "Not awarded" in html
    assert "1 / 3" in html  # cases passed: only the refusal case
    assert "citation_recall" in html and "0 / 2" in html
    assert "Hints" in html and "Cite the document your answer relies on" in html
    listing = browser.get("/submissions").get_data(as_text=True)
    assert "refuser" in listing and "Not awarded" in listing


def test_feedback_page_of_another_student_is_404(
    app: Flask, make_user: Callable[..., Account], submit: Callable[..., str]
) -> None:
    """A student cannot open another student's feedback page."""
    alice, bob = make_user(name="alice"), make_user(name="bob")
    alices = submit(alice)
    assert logged_in(app, bob).get(f"/submissions/{alices}").status_code == 404
    assert logged_in(app, alice).get(f"/submissions/{alices}").status_code == 200


def test_session_reads_the_api_but_cannot_post_to_it(
    app: Flask, student: Account, submit: Callable[..., str]
) -> None:
    """The page session may poll the JSON API (GET) but uploads there need the bearer token."""
    submission_id = submit(student)
    browser = logged_in(app, student)
    assert browser.get(f"/api/submissions/{submission_id}").get_json()["status"] == "queued"
    post = browser.post("/api/submissions", data={"package": (io.BytesIO(b"x"), "a.zip")})
    assert post.status_code == 401


def test_rotating_a_token_ends_its_sessions(app: Flask, student: Account, engine: Engine) -> None:
    """A session signed for an old token stops working once the token is replaced."""
    browser = logged_in(app, student)
    assert browser.get("/submissions").status_code == 200
    with session_scope(engine) as session:
        user = get_user_by_name(session=session, name=student.name)
        assert user is not None
        rotate_token(session=session, user=user)
    assert browser.get("/submissions").status_code == 302


def test_logout_clears_the_session(app: Flask, student: Account) -> None:
    """Logging out (a CSRF-protected POST) ends the session."""
    browser = logged_in(app, student)
    token = csrf_token(browser, "/submissions")
    assert browser.post("/logout", data={"csrf_token": token}).status_code == 302
    assert browser.get("/submissions").status_code == 302


def test_a_cookie_replayed_after_logout_gets_the_login_form(app: Flask, student: Account) -> None:
    """Logout ends the session server-side: the old cookie, sent again by another client, gets
    the login form (and 401 from the API), and so does a second session opened before."""
    browser, other_device = logged_in(app, student), logged_in(app, student)
    cookie = browser.get_cookie("grader_session")
    assert cookie is not None and browser.get("/submissions").status_code == 200
    assert (
        browser.post(
            "/logout", data={"csrf_token": csrf_token(browser, "/submissions")}
        ).status_code
        == 302
    )
    replay = app.test_client()
    replay.set_cookie("grader_session", cookie.value)
    page = replay.get("/submissions")
    assert page.status_code == 302 and page.headers["Location"].startswith("/login")
    assert replay.get("/api/me").status_code == 401
    assert other_device.get("/submissions").status_code == 302
    assert logged_in(app, student).get("/submissions").status_code == 200  # log in again


def test_pages_send_security_headers(app: Flask, make_user: Callable[..., Account]) -> None:
    """Pages forbid framing and inline script, and API answers are not cached."""
    browser = logged_in(app, make_user(Role.STUDENT))
    page = browser.get("/submissions")
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    assert page.headers["X-Frame-Options"] == "DENY"
    assert browser.get("/api/submissions").headers["Cache-Control"] == "no-store"
