#!/usr/bin/env bash
# Creates the two databases of the distributed deployment, each owned by its own
# login role:
#   - "airflow": Airflow's metadata database (role AIRFLOW_DB_USER);
#   - "flowctl": flowctl's results and control-plane database (role FLOWCTL_DB_USER).
#
# The postgres image runs the scripts of /docker-entrypoint-initdb.d once, on the
# first start with an empty data volume, as POSTGRES_USER against POSTGRES_DB.
# Outside the image, set PGHOST/PGPORT as for psql. Values go through psql
# variables (:"name" quotes an identifier, :'name' a literal), never through
# string concatenation.
set -euo pipefail

: "${POSTGRES_USER:?POSTGRES_USER must be set (the superuser that runs this script)}"
: "${POSTGRES_DB:=${POSTGRES_USER}}"
: "${AIRFLOW_DB_NAME:=airflow}"
: "${AIRFLOW_DB_USER:=airflow}"
: "${AIRFLOW_DB_PASSWORD:?AIRFLOW_DB_PASSWORD must be set (password of the Airflow role)}"
: "${FLOWCTL_DB_NAME:=flowctl}"
: "${FLOWCTL_DB_USER:=flowctl}"
: "${FLOWCTL_DB_PASSWORD:?FLOWCTL_DB_PASSWORD must be set (password of the flowctl role)}"

create_database() {
    local db="$1" user="$2" password="$3"
    echo "flowctl initdb: creating role ${user} and database ${db}"
    psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
        -v db="$db" -v db_user="$user" -v db_password="$password" <<'SQL'
CREATE ROLE :"db_user" WITH LOGIN PASSWORD :'db_password';
CREATE DATABASE :"db" OWNER :"db_user" ENCODING 'UTF8' TEMPLATE template0;
REVOKE ALL ON DATABASE :"db" FROM PUBLIC;
GRANT ALL PRIVILEGES ON DATABASE :"db" TO :"db_user";
SQL
}

create_database "$AIRFLOW_DB_NAME" "$AIRFLOW_DB_USER" "$AIRFLOW_DB_PASSWORD"
create_database "$FLOWCTL_DB_NAME" "$FLOWCTL_DB_USER" "$FLOWCTL_DB_PASSWORD"
