#!/bin/sh
# Debian packages of the local source databases for `cdc-assets stack up --sources`:
# MariaDB (mariadbd, mariadb-install-db, the mariadb client) and PostgreSQL 15 (initdb, postgres,
# psql). Installs only what is missing, and only as root; otherwise prints the command to run.
# The stack runs its own private servers on loopback; the packages' system services are not used.
set -eu

missing=""
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || missing="$missing mariadb-server"
command -v mariadb >/dev/null 2>&1 || missing="$missing mariadb-client"
[ -x /usr/lib/postgresql/15/bin/initdb ] || missing="$missing postgresql"
[ -x /usr/bin/psql ] || missing="$missing postgresql-client"

if [ -z "$missing" ]; then
    echo "source databases: mariadb-server and postgresql already installed"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "source databases: missing$missing and apt-get is not available; install MariaDB and PostgreSQL 15 another way" >&2
    exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "source databases: missing$missing; run as root:" >&2
    echo "    apt-get install -y$missing" >&2
    exit 1
fi
echo "source databases: installing$missing"
# shellcheck disable=SC2086 # word splitting of the package list is intended
DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing || {
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing
}
