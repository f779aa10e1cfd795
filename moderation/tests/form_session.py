"""A moderator's cookies against a real server, got by logging in through the real form."""

from __future__ import annotations

import http.cookiejar
import json
import re
import urllib.error
import urllib.parse
import urllib.request


class FormSession:
    def __init__(self, host: str, username: str, password: str, *, timeout: float = 30) -> None:
        self.username = username
        self.timeout = timeout
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        login = f"http://{host}/accounts/login/"
        form = self.opener.open(login, timeout=timeout).read().decode()
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
        fields = {"username": username, "password": password, "csrfmiddlewaretoken": token}
        landed = self.opener.open(login, urllib.parse.urlencode(fields).encode(), timeout=timeout)
        assert urllib.parse.urlsplit(landed.url).path == "/", f"{username} could not log in on {host}"

    def cookie(self, name: str) -> str:
        return next(c.value for c in self.jar if c.name == name)

    def decide(self, host: str, item: str, decision: str) -> tuple[int, dict]:
        """POST the JSON decision; (status, body) for every HTTP answer, error pages included."""
        request = urllib.request.Request(
            f"http://{host}/api/items/{item}/decision",
            data=json.dumps({"decision": decision}).encode(),
            headers={"Content-Type": "application/json", "X-CSRFToken": self.cookie("csrftoken")},
        )
        try:
            with self.opener.open(request, timeout=self.timeout) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as error:
            body = error.read()
            try:
                return error.code, json.loads(body)
            except ValueError:
                return error.code, {"raw": body[:300].decode(errors="replace")}
