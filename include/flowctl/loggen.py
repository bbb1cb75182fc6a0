"""Demo input for the log-ETL pipeline: seeded web-server access log lines.

The lines look like a real site's Combined Log Format log, because the ETL's
interesting cases come from real traffic's shape: a few clients (and /24
networks) produce most requests, crawlers and scripts are a noticeable
minority, static files are often answered ``304`` with no body, scanners
probe for pages that do not exist, the odd upstream error shows as ``5xx``,
and timestamps move forward with irregular gaps in the server's local time
zone.

A configurable fraction of lines is malformed, in the ways real logs break
(a cut-off line, a TLS handshake sent to the HTTP port, a bad time stamp, a
proxy writing junk), so the DLQ path runs in every demo and benchmark.
:func:`labelled_lines` says which lines are malformed and how, so a test can
check the parser rejects exactly those. The output is deterministic for a
seed: a test, a benchmark and the reconcile job can regenerate exactly the
log that was ingested.
"""

from __future__ import annotations

import datetime as dt
import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass

#: Fraction of malformed lines in the demo input when nothing else is asked for.
DEFAULT_MALFORMED_FRACTION = 0.01

#: The ways :func:`labelled_lines` breaks a line.
MALFORMED_KINDS = (
    "bad_timestamp",
    "bad_status",
    "bad_ip",
    "bad_size",
    "truncated",
    "tls_handshake",
    "missing_quote",
    "empty",
)

_START = dt.datetime(2026, 1, 5, 8, 0, 0, tzinfo=dt.timezone(dt.timedelta(hours=8)))
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

_BROWSERS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_6) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/18.1 Safari/605.1.15",
    "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Mobile Safari/537.36",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0.0",
)
_BOTS = (
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
    "Mozilla/5.0 (compatible; Baiduspider/2.0; +http://www.baidu.com/search/spider.html)",
    "curl/8.5.0",
    "python-requests/2.32.3",
    "Wget/1.21.4",
    "-",
)
_PAGES = (
    "/",
    "/index.html",
    "/products",
    "/products/{n}",
    "/products/{n}/reviews?page={p}",
    "/search?q={w}",
    "/cart",
    "/about",
    "/blog/{n}-{w}",
)
_STATIC = (
    "/static/css/site.css",
    "/static/js/app.js",
    "/static/js/vendor.js",
    "/images/logo.png",
    "/images/products/{n}.jpg",
    "/favicon.ico",
)
_API = ("/api/v1/items?page={p}", "/api/v1/items/{n}", "/api/v1/cart", "/api/v1/session")
_PROBES = ("/wp-login.php", "/.env", "/admin/config.php", "/phpmyadmin/", "/.git/config")
_WORDS = ("shoes", "lamp", "green+tea", "usb-c", "backpack", "%E8%8C%B6", "desk", "gift")
_REFERERS = (
    "https://www.google.com/",
    "https://www.bing.com/",
    "https://www.baidu.com/s?wd=shop",
    "https://news.ycombinator.com/",
)
_USERS = ("alice", "bob", "carol", "dave")


class LogGenError(ValueError):
    """A generator argument is out of range; the message names it and its value."""


@dataclass(frozen=True)
class GeneratedLine:
    """One generated line; ``malformed`` names how it was broken (``None``: a good line)."""

    text: str
    malformed: str | None


@dataclass(frozen=True)
class _Client:
    ip: str
    agent: str
    bot: bool
    user: str


def _clients(rng: random.Random, count: int) -> list[_Client]:
    """Clients packed into few networks, so /24 prefixes aggregate many addresses."""
    networks = [
        (
            rng.choice((23, 31, 45, 58, 61, 89, 101, 117, 183, 203)),
            rng.randrange(256),
            rng.randrange(256),
        )
        for _ in range(max(1, count // 20))
    ]
    clients = []
    for i in range(count):
        bot = rng.random() < 0.12
        if rng.random() < 0.06:
            net, host = rng.randrange(65536), rng.randrange(1, 65536)
            ip = f"2001:db8:{rng.randrange(16):x}:{net:x}::{host:x}"
        else:
            a, b, c = rng.choice(networks)
            ip = f"{a}.{b}.{c}.{rng.randrange(1, 255)}"
        agent = rng.choice(_BOTS) if bot else rng.choice(_BROWSERS)
        user = rng.choice(_USERS) if not bot and rng.random() < 0.05 else "-"
        clients.append(
            _Client(ip=ip, agent=agent, bot=bot, user=f"{user}{i}" if user != "-" else "-")
        )
    return clients


def _fill(rng: random.Random, template: str) -> str:
    return template.format(n=rng.randint(1, 5000), p=rng.randint(1, 40), w=rng.choice(_WORDS))


def format_timestamp(when: dt.datetime) -> str:
    """``dd/Mon/yyyy:HH:MM:SS +zzzz`` in ``when``'s own zone, month names in English."""
    return (
        f"{when.day:02d}/{_MONTHS[when.month - 1]}/{when.year:04d}:"
        f"{when.hour:02d}:{when.minute:02d}:{when.second:02d} {when.strftime('%z')}"
    )


def _request(rng: random.Random, client: _Client) -> tuple[str, str, int, int]:
    """``(method, target, status, bytes)`` of one plausible request."""
    roll = rng.random()
    if client.bot and rng.random() < 0.3:
        target = rng.choice(("/robots.txt", "/sitemap.xml", *_PROBES))
        status = 200 if target in ("/robots.txt", "/sitemap.xml") else rng.choice((404, 404, 403))
        return "GET", target, status, rng.randint(200, 4000)
    if roll < 0.45:
        method, target = "GET", _fill(rng, rng.choice(_PAGES))
        status = rng.choices((200, 301, 302, 404, 500, 502, 503), (900, 20, 30, 30, 8, 6, 6))[0]
        size = int(rng.lognormvariate(9.5, 0.8)) if status == 200 else rng.randint(150, 600)
    elif roll < 0.8:
        method, target = "GET", _fill(rng, rng.choice(_STATIC))
        status = rng.choices((200, 304, 404), (600, 380, 20))[0]
        size = 0 if status == 304 else int(rng.lognormvariate(10.5, 1.2))
    elif roll < 0.97:
        method = rng.choices(("GET", "POST", "PUT", "DELETE"), (60, 30, 6, 4))[0]
        target = _fill(rng, rng.choice(_API))
        status = rng.choices(
            (200, 201, 204, 400, 401, 429, 500, 503), (800, 40, 30, 30, 30, 20, 10, 5)
        )[0]
        if method == "POST" and status == 200:
            status = 201
        size = 0 if status == 204 else int(rng.lognormvariate(7.0, 1.0))
    else:
        method, target = "HEAD", _fill(rng, rng.choice(_PAGES))
        status, size = 200, 0
    return method, target, status, size


def _good_line(rng: random.Random, client: _Client, when: dt.datetime) -> str:
    method, target, status, size = _request(rng, client)
    protocol = rng.choices(("HTTP/1.1", "HTTP/2.0", "HTTP/1.0"), (70, 26, 4))[0]
    referer = "-"
    if not client.bot and rng.random() < 0.6:
        referer = (
            f"https://www.example.com{_fill(rng, rng.choice(_PAGES))}"
            if rng.random() < 0.7
            else rng.choice(_REFERERS)
        )
    size_text = "-" if size == 0 and rng.random() < 0.5 else str(size)
    return (
        f'{client.ip} - {client.user} [{format_timestamp(when)}] "{method} {target} {protocol}" '
        f'{status} {size_text} "{referer}" "{client.agent}"'
    )


def _break(rng: random.Random, line: str, kind: str) -> str:
    """``line`` broken the way ``kind`` says; every result is rejected by the parser."""
    ip, rest = line.split(" ", 1)
    open_ts, close_ts = line.index("["), line.index("]")
    request_end = line.index('"', line.index('"') + 1)
    if kind == "bad_timestamp":
        bad = rng.choice(
            ("32/Foo/2020:13:55:36 -0700", "2026-01-05T08:00:00Z", "05/Jan/2026:25:61:00 +0800")
        )
        return line[: open_ts + 1] + bad + line[close_ts:]
    if kind == "bad_status":
        head, tail = line[: request_end + 1], line[request_end + 2 :]
        return head + " " + rng.choice(("2OO", "999", "-")) + tail[tail.index(" ") :]
    if kind == "bad_ip":
        return rng.choice(("999.12.4.1", "unknown", "10.0.0")) + " " + rest
    if kind == "bad_size":
        head, tail = line[: request_end + 1], line[request_end + 2 :]
        status, after = tail.split(" ", 1)
        return f"{head} {status} {rng.choice(('12k', '-1', '1.5'))} {after.split(' ', 1)[1]}"
    if kind == "truncated":  # cut inside the request: its quote is never closed
        return line[: rng.randint(line.index('"') + 1, request_end - 1)]
    if kind == "tls_handshake":  # what Apache logs when a client speaks TLS to port 80
        return (
            f"{ip} - - [{line[open_ts + 1 : close_ts]}] "
            '"\\x16\\x03\\x01\\x02\\x00\\x01\\x00\\x01\\xfc\\x03\\x03" 400 226 "-" "-"'
        )
    if kind == "missing_quote":
        return line[:request_end] + line[request_end + 1 :].replace('"', "", 1)
    if kind == "empty":
        return ""
    raise LogGenError(f"malformed kind={kind!r} is not one of {MALFORMED_KINDS}")


def labelled_lines(
    count: int,
    *,
    seed: int = 7,
    malformed_fraction: float = DEFAULT_MALFORMED_FRACTION,
    clients: int = 2000,
    start: dt.datetime = _START,
    mean_gap_s: float = 0.05,
) -> Iterator[GeneratedLine]:
    """Yield ``count`` lines, each malformed with probability ``malformed_fraction``.

    Clients' activity follows Zipf's law (a few heavy hitters); gaps between
    requests are exponential with mean ``mean_gap_s``; ``start``'s time zone
    is the server's (it must be aware).
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise LogGenError(f"count={count!r} must be an integer >= 0")
    if not 0.0 <= malformed_fraction <= 1.0:
        raise LogGenError(f"malformed_fraction={malformed_fraction!r} must lie in [0, 1]")
    if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
        raise LogGenError(f"clients={clients!r} must be an integer >= 1")
    if start.tzinfo is None:
        raise LogGenError(f"start={start!r} must be timezone-aware (the server's zone)")
    if not mean_gap_s > 0:
        raise LogGenError(f"mean_gap_s={mean_gap_s!r} must be > 0")
    rng = random.Random(seed)
    population = _clients(rng, clients)
    cum_weights = list(itertools.accumulate(1.0 / r for r in range(1, clients + 1)))
    when = start
    for _ in range(count):
        when += dt.timedelta(seconds=rng.expovariate(1.0 / mean_gap_s))
        client = rng.choices(population, cum_weights=cum_weights)[0]
        line = _good_line(rng, client, when.replace(microsecond=0))
        if rng.random() < malformed_fraction:
            kind = rng.choice(MALFORMED_KINDS)
            yield GeneratedLine(_break(rng, line, kind), kind)
        else:
            yield GeneratedLine(line, None)


def access_log_lines(
    count: int, *, seed: int = 7, malformed_fraction: float = DEFAULT_MALFORMED_FRACTION
) -> Iterator[str]:
    """The text of :func:`labelled_lines` (what ingest produces to Kafka)."""
    for line in labelled_lines(count, seed=seed, malformed_fraction=malformed_fraction):
        yield line.text
