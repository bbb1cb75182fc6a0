"""``cluster down --purge``'s deletion, on the real PostgreSQL server: the cluster's two
databases and the state it wrote in its home, and nothing else of the home."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
import sqlalchemy as sa

from flowctl.adapters import postgres_admin
from flowctl.services.base import ServiceError
from flowctl.services.cluster_layout import DEFAULT_TANSU_STORAGE, ClusterLayout
from flowctl.services.cluster_purge import purge, state_paths
from tests.conftest import _postgres_base_url


def _server_url() -> str:
    base = sa.make_url(_postgres_base_url())
    return base.set(database="postgres").render_as_string(hide_password=False)


def _exists(url: str, name: str) -> bool:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            found = conn.execute(
                sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}
            )
            return found.scalar() is not None
    finally:
        engine.dispose()


def _layout_with_own_databases(
    home: Path, tansu_storage: str = DEFAULT_TANSU_STORAGE
) -> ClusterLayout:
    """A layout on the local server whose two databases no other test uses."""
    tag = secrets.token_hex(4)
    return ClusterLayout(
        home=home,
        postgres_url=_server_url(),
        flowctl_db=f"flowctl_p_{tag}",
        airflow_db=f"airflow_p_{tag}",
        # Tansu's engine matters only where Tansu is the broker
        broker="tansu" if tansu_storage != DEFAULT_TANSU_STORAGE else "kafka",
        tansu_storage=tansu_storage,
    )


def test_purge_drops_the_databases_and_deletes_only_the_cluster_state(tmp_path: Path) -> None:
    layout = _layout_with_own_databases(tmp_path)
    postgres_admin.ensure_databases(layout.postgres_url, [layout.flowctl_db, layout.airflow_db])
    # A session left open (as by a killed driver) does not stop the drop.
    engine = sa.create_engine(layout.database_url(layout.flowctl_db))
    conn = engine.connect()
    layout.save()
    for path in state_paths(layout):
        if path.suffix != ".json":
            (path / "sub").mkdir(parents=True)
            (path / "sub" / "x.log").write_text("x")
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "mine.toml").write_text("kept")
    try:
        messages = purge(layout)
    finally:
        conn.close()
        engine.dispose()
    assert f"purge: dropped database {layout.flowctl_db}" in messages
    assert f"purge: dropped database {layout.airflow_db}" in messages
    assert not _exists(layout.postgres_url, layout.flowctl_db)
    assert not _exists(layout.postgres_url, layout.airflow_db)
    for path in state_paths(layout):
        assert not path.exists()
        assert f"purge: deleted {path}" in messages
    assert (tmp_path / "pipelines" / "mine.toml").read_text() == "kept"
    # Again: nothing left to delete, and it says so.
    again = purge(layout)
    assert again == [
        f"purge: database {layout.flowctl_db} did not exist",
        f"purge: database {layout.airflow_db} did not exist",
    ]


@pytest.mark.parametrize(("storage", "named"), [("s3", True), ("memory", False)])
def test_an_external_s3_log_is_said_to_be_kept_only_when_tansu_stored_it_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, storage: str, named: bool
) -> None:
    """On the memory engine an ``AWS_ENDPOINT`` of the environment holds no log of the
    cluster's: purge says nothing of it."""
    monkeypatch.setenv("AWS_ENDPOINT", "https://s3.example.net")
    layout = _layout_with_own_databases(tmp_path, tansu_storage=storage)
    kept = (
        "purge: the Tansu log in the S3 store at https://s3.example.net is kept "
        "(not the cluster's to delete)"
    )
    assert (kept in purge(layout)) is named


def test_purge_with_the_server_unreachable_deletes_nothing(tmp_path: Path) -> None:
    layout = ClusterLayout(
        home=tmp_path, postgres_url="postgresql+psycopg2://postgres@127.0.0.1:1/postgres"
    )
    layout.save()
    with pytest.raises(ServiceError, match=r"127\.0\.0\.1:1.*nothing deleted"):
        purge(layout)
    assert layout.path.exists()


def test_only_down_takes_purge_and_it_is_off_unless_given() -> None:
    from flowctl import cli

    parser = cli.build_parser()
    assert parser.parse_args(["cluster", "down"]).purge is False
    assert parser.parse_args(["cluster", "down", "--purge"]).purge is True
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["cluster", "up", "--purge"])
    assert exc.value.code == 2
