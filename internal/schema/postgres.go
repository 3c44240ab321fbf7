package schema

// Postgres is the DDL on PostgreSQL.
var Postgres = Family{
	Quote: func(ident string) string { return `"` + ident + `"` },
	Ledger: func(q, _ string) string {
		return `CREATE TABLE IF NOT EXISTS ` + q + ` (
	namespace   varchar(128) NOT NULL DEFAULT '',
	job         varchar(191) NOT NULL,
	slot        timestamptz  NOT NULL,
	status      varchar(16)  NOT NULL CHECK (status IN ` + StatusList + `),
	owner       varchar(255) NOT NULL DEFAULT '',
	started_at  timestamptz  NOT NULL,
	finished_at timestamptz,
	error       text,
	PRIMARY KEY (namespace, job, slot)
)`
	},
	LedgerIndex: func(q, ix string) string {
		return "CREATE INDEX IF NOT EXISTS " + ix + " ON " + q + " (namespace, slot)"
	},
	Fence: func(q string) string {
		return `CREATE TABLE IF NOT EXISTS ` + q + ` (
	namespace varchar(128) NOT NULL DEFAULT '',
	lock_key  text         NOT NULL,
	token     bigint       NOT NULL,
	PRIMARY KEY (namespace, lock_key)
)`
	},
	Controls: func(q string) string {
		return `CREATE TABLE IF NOT EXISTS ` + q + ` (
	namespace    varchar(128) NOT NULL DEFAULT '',
	kind         varchar(16)  NOT NULL,
	name         varchar(255) NOT NULL,
	paused       boolean      NOT NULL DEFAULT false,
	schedule     text,
	resign_at    timestamptz,
	resign_owner varchar(255) NOT NULL DEFAULT '',
	cooldown_ms  bigint       NOT NULL DEFAULT 0,
	rerun_asked  bigint       NOT NULL DEFAULT 0,
	rerun_seen   bigint       NOT NULL DEFAULT 0,
	author       varchar(255) NOT NULL DEFAULT '',
	reason       text,
	changed_at   timestamptz  NOT NULL,
	PRIMARY KEY (namespace, kind, name)
)`
	},
	Actions: func(q, _ string) string {
		return `CREATE TABLE IF NOT EXISTS ` + q + ` (
	id        bigserial    PRIMARY KEY,
	namespace varchar(128) NOT NULL DEFAULT '',
	kind      varchar(16)  NOT NULL,
	name      varchar(255) NOT NULL,
	slot      timestamptz,
	author    varchar(255) NOT NULL,
	reason    text,
	outcome   text,
	at        timestamptz  NOT NULL
)`
	},
	ActionsIndex: func(q, ix string) string {
		return "CREATE INDEX IF NOT EXISTS " + ix + " ON " + q + " (namespace, name, id)"
	},
	Lease: func(q string) string {
		return `CREATE TABLE IF NOT EXISTS ` + q + ` (
	namespace   varchar(128) NOT NULL DEFAULT '',
	lock_key    text         NOT NULL,
	reader      varchar(64)  NOT NULL DEFAULT '',
	epoch       bigint       NOT NULL,
	mode        varchar(16)  NOT NULL DEFAULT 'exclusive',
	owner       varchar(255) NOT NULL DEFAULT '',
	holder      varchar(64)  NOT NULL DEFAULT '',
	acquired_at timestamptz  NOT NULL,
	expires_at  timestamptz  NOT NULL,
	renewals    bigint       NOT NULL DEFAULT 0,
	readers     bigint       NOT NULL DEFAULT 0,
	PRIMARY KEY (namespace, lock_key, reader)
)`
	},
}
