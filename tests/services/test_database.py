"""The database service: reachable SQLite and PostgreSQL, clear errors otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowctl.config import Settings
from flowctl.services import database
from flowctl.services.base import UNREACHABLE, UP, ServiceError
from flowctl.services.ports import free_port


@pytest.mark.integration
def test_up_and_status_on_both_databases(database_url: str, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, database_url=database_url)
    assert "reachable" in database.DatabaseService().up(settings)
    row = database.DatabaseService().status(settings)
    assert row.state == UP and row.ok


def test_sqlite_parent_directories_are_created(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "flowctl.db"
    database.check(f"sqlite:///{target}")
    assert target.is_file()


def test_unreachable_server_names_the_url_with_the_password_masked() -> None:
    url = f"postgresql+psycopg2://flow:s3cret@127.0.0.1:{free_port()}/nowhere"
    with pytest.raises(ServiceError) as err:
        database.check(url, timeout=2)
    message = str(err.value)
    assert "s3cret" not in message
    assert f"postgresql+psycopg2://flow:***@127.0.0.1:{url.split(':')[3]}" in message
    status = database.DatabaseService().status(Settings(database_url=url))
    assert status.state == UNREACHABLE and "s3cret" not in status.address + status.detail


def test_malformed_url_is_named() -> None:
    with pytest.raises(ServiceError, match="'not a url' is not a valid SQLAlchemy URL"):
        database.check("not a url")


def test_unknown_driver_is_named() -> None:
    with pytest.raises(ServiceError, match=r"no driver for nosuchdb://u:\*\*\*@h/d"):
        database.check("nosuchdb://u:pw@h/d")


def test_down_leaves_the_database_alone(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    database.DatabaseService().up(settings)
    assert "nothing to stop" in database.DatabaseService().down(settings)
    assert (tmp_path / "flowctl.db").is_file()
