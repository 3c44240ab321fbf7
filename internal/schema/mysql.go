package schema

// MySQL is the DDL on MySQL and MariaDB (InnoDB, utf8mb4; keys compared
// byte for byte).
var MySQL = Family{
	Quote: func(ident string) string { return "`" + ident + "`" },
	Ledger: func(q, ix string) string {
		return "CREATE TABLE IF NOT EXISTS " + q + ` (
	namespace   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
	job         VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
	slot        DATETIME(6)  NOT NULL,
	status      VARCHAR(16)  NOT NULL,
	owner       VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL DEFAULT '',
	started_at  DATETIME(6)  NOT NULL,
	finished_at DATETIME(6)  NULL,
	error       TEXT         CHARACTER SET utf8mb4 NULL,
	PRIMARY KEY (namespace, job, slot),
	KEY ` + ix + ` (namespace, slot),
	CHECK (status IN ` + StatusList + `)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`
	},
	LedgerIndex: func(string, string) string { return "" },
	Fence: func(q string) string {
		return "CREATE TABLE IF NOT EXISTS " + q + ` (
	namespace VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
	lock_key  VARBINARY(1100) NOT NULL,
	token     BIGINT NOT NULL,
	PRIMARY KEY (namespace, lock_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`
	},
	Controls: func(q string) string {
		return "CREATE TABLE IF NOT EXISTS " + q + ` (
	namespace    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
	kind         VARCHAR(16)  NOT NULL,
	name         VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
	paused       TINYINT(1)   NOT NULL DEFAULT 0,
	schedule     TEXT         CHARACTER SET utf8mb4 NULL,
	resign_at    DATETIME(6)  NULL,
	resign_owner VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL DEFAULT '',
	cooldown_ms  BIGINT       NOT NULL DEFAULT 0,
	rerun_asked  BIGINT       NOT NULL DEFAULT 0,
	rerun_seen   BIGINT       NOT NULL DEFAULT 0,
	author       VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL DEFAULT '',
	reason       TEXT         CHARACTER SET utf8mb4 NULL,
	changed_at   DATETIME(6)  NOT NULL,
	PRIMARY KEY (namespace, kind, name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`
	},
	Actions: func(q, ix string) string {
		return "CREATE TABLE IF NOT EXISTS " + q + ` (
	id        BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
	namespace VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
	kind      VARCHAR(16)  NOT NULL,
	name      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
	slot      DATETIME(6)  NULL,
	author    VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL,
	reason    TEXT         CHARACTER SET utf8mb4 NULL,
	outcome   TEXT         CHARACTER SET utf8mb4 NULL,
	at        DATETIME(6)  NOT NULL,
	KEY ` + ix + ` (namespace, name, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`
	},
	ActionsIndex: func(string, string) string { return "" },
	Lease: func(q string) string {
		return "CREATE TABLE IF NOT EXISTS " + q + ` (
	namespace   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
	lock_key    VARBINARY(1100) NOT NULL,
	reader      VARBINARY(64) NOT NULL DEFAULT '',
	epoch       BIGINT NOT NULL,
	mode        VARCHAR(16) NOT NULL DEFAULT 'exclusive',
	owner       VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL DEFAULT '',
	holder      VARBINARY(64) NOT NULL DEFAULT '',
	acquired_at DATETIME(6) NOT NULL,
	expires_at  DATETIME(6) NOT NULL,
	renewals    BIGINT NOT NULL DEFAULT 0,
	readers     BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (namespace, lock_key, reader)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`
	},
}
