#!/usr/bin/env bash
# Make sure the local Redis and PostgreSQL answer (they run on machines of this kind; this
# starts whichever has stopped, with the machine's own commands), then wait until both answer.
set -euo pipefail

if ! redis-cli -h 127.0.0.1 ping >/dev/null 2>&1; then
    echo "services: starting redis" >&2
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
        --dir /var/lib/redis --logfile /var/log/redis/ci.log
fi
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
    echo "services: starting postgresql" >&2
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start
fi
for _ in $(seq 1 60); do
    if redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && pg_isready -q -h 127.0.0.1 -p 5432; then
        exit 0
    fi
    sleep 1
done
echo "services: redis or postgresql did not answer within 60 s" >&2
exit 1
