package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"
)

// MariaDBReplication is a MariaDB primary with a replica (read_only=ON)
// that replicates through Link, so that a test can freeze the replication
// alone, and a Front proxy that clients reach the primary through and
// that a failover points at the promoted replica (SwitchFront). With
// SemiSync the primary waits for the replica's acknowledgement of every
// commit (rpl_semi_sync_master_wait_point = AFTER_SYNC, and a timeout of
// an hour so that it does not fall back to asynchronous replication while
// a test runs); without it the replication is asynchronous.
type MariaDBReplication struct {
	Primary, Replica *Server
	Link             *Proxy // replica -> primary replication connection
	Front            *Proxy // clients -> the primary, then the promoted replica
	SemiSync         bool
}

// StartMariaDBReplication starts a primary and its replica and waits until
// the replica replicates (with semiSync: as the primary's semi-synchronous
// client). Both are stopped and removed in tb.Cleanup.
func StartMariaDBReplication(tb testing.TB, semiSync bool) *MariaDBReplication {
	tb.Helper()
	b := findBinaries(MariaDB, false)
	if err := b.err(MariaDB); err != nil {
		skipOrFail(tb, err)
	}
	r := &MariaDBReplication{SemiSync: semiSync}
	pExtra := []string{"--server-id=1", "--log-bin=mysql-bin", "--binlog-format=ROW"}
	rExtra := []string{"--server-id=2", "--log-bin=mysql-bin", "--binlog-format=ROW", "--log-slave-updates", "--read-only=ON", "--skip-slave-start"}
	if semiSync {
		// enabled once the replica runs: with no replica a commit
		// would wait for the timeout (CREATE DATABASE at start-up)
		pExtra = append(pExtra, "--rpl-semi-sync-master-timeout=3600000", "--rpl-semi-sync-master-wait-point=AFTER_SYNC")
		rExtra = append(rExtra, "--rpl-semi-sync-slave-enabled=ON")
	}
	var servers [2]*Server
	var errs [2]error
	done := make(chan int, 2)
	for i, extra := range [][]string{pExtra, rExtra} {
		go func() {
			s, err := newServer(MariaDB, b, pgTarget{})
			if err == nil {
				s.extra = extra
				if err = s.start(false); err != nil {
					s.Close()
					s = nil
				}
			}
			servers[i], errs[i] = s, err
			done <- i
		}()
	}
	<-done
	<-done
	r.Primary = stopAtCleanup(tb, servers[0], errs[0])
	r.Replica = stopAtCleanup(tb, servers[1], errs[1])
	r.Link = StartProxy(tb, hostPort(r.Primary.Port()))
	r.Front = StartProxy(tb, hostPort(r.Primary.Port()))
	r.Replica.Exec(tb, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1", r.Link.Port()))
	r.Replica.Exec(tb, "START SLAVE")
	if semiSync {
		r.Primary.Exec(tb, "SET GLOBAL rpl_semi_sync_master_enabled = ON")
	}
	r.waitReplicating(tb)
	return r
}

// waitReplicating waits up to a minute until both replication threads run
// (and, with SemiSync, the primary counts the replica as its client).
func (r *MariaDBReplication) waitReplicating(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		io, sqlRunning, lastErr := r.slaveStatus(tb)
		ok := io == "Yes" && sqlRunning == "Yes"
		if ok && r.SemiSync {
			ok = globalStatus(tb, r.Primary, "Rpl_semi_sync_master_clients") == "1"
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testdb: replica not replicating after 1m: Slave_IO_Running %q, Slave_SQL_Running %q, last error %q", io, sqlRunning, lastErr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// slaveStatus reads SHOW SLAVE STATUS's Slave_IO_Running, Slave_SQL_Running
// and Last_Error of the replica.
func (r *MariaDBReplication) slaveStatus(tb testing.TB) (io, sqlRunning, lastErr string) {
	tb.Helper()
	row, err := showRow(r.Replica.DB(tb), "SHOW SLAVE STATUS")
	if err != nil {
		tb.Fatalf("testdb: SHOW SLAVE STATUS: %v", err)
	}
	return row["Slave_IO_Running"], row["Slave_SQL_Running"], row["Last_IO_Error"] + row["Last_SQL_Error"]
}

// showRow returns the first row of a SHOW statement by column name (empty
// when it has none).
func showRow(db *sql.DB, query string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	if !rows.Next() {
		return out, rows.Err()
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	for i, c := range cols {
		out[c] = vals[i].String
	}
	return out, rows.Err()
}

// globalStatus reads one SHOW GLOBAL STATUS variable of s.
func globalStatus(tb testing.TB, s *Server, name string) string {
	tb.Helper()
	row, err := showRow(s.DB(tb), "SHOW GLOBAL STATUS LIKE '"+name+"'")
	if err != nil {
		tb.Fatalf("testdb: SHOW GLOBAL STATUS %s: %v", name, err)
	}
	return row["Value"]
}

// FrontDSN is a go-sql-driver/mysql DSN of database "ormlock" through
// Front.
func (r *MariaDBReplication) FrontDSN() string { return mysqlDSN(r.Front.Port()) }

// mysqlDSN is the clients' DSN of database "ormlock" on port.
func mysqlDSN(port int) string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s?parseTime=true&loc=UTC", port, dbName)
}

// WaitReplayed waits up to 30s until the replica has applied everything
// the primary has written so far (its GTID position).
func (r *MariaDBReplication) WaitReplayed(tb testing.TB) {
	tb.Helper()
	var pos string
	if err := r.Primary.DB(tb).QueryRow("SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		tb.Fatalf("testdb: primary's GTID position: %v", err)
	}
	var res int
	if err := r.Replica.DB(tb).QueryRow("SELECT MASTER_GTID_WAIT(?, 30)", pos).Scan(&res); err != nil || res != 0 {
		tb.Fatalf("testdb: replica has not applied %s after 30s: %v (MASTER_GTID_WAIT %d)", pos, err, res)
	}
}

// Promote makes the replica a primary once it has applied every event it
// received: replication stopped and forgotten, read_only off.
func (r *MariaDBReplication) Promote(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		row, err := showRow(r.Replica.DB(tb), "SHOW SLAVE STATUS")
		if err != nil {
			tb.Fatalf("testdb: SHOW SLAVE STATUS: %v", err)
		}
		if row["Master_Log_File"] == row["Relay_Master_Log_File"] && row["Read_Master_Log_Pos"] == row["Exec_Master_Log_Pos"] {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testdb: replica has not applied its relay log after 30s: %v", row)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.Replica.Exec(tb, "STOP SLAVE")
	r.Replica.Exec(tb, "RESET SLAVE ALL")
	r.Replica.Exec(tb, "SET GLOBAL read_only = OFF")
}

// SwitchFront points Front at the promoted replica and cuts the
// connections it carried to the old primary.
func (r *MariaDBReplication) SwitchFront() {
	r.Front.SetUpstream(hostPort(r.Replica.Port()))
	r.Front.Cut()
}

// SemiSyncCounts returns the primary's count of commits the replica
// acknowledged (Rpl_semi_sync_master_yes_tx) and of those that went
// without (Rpl_semi_sync_master_no_tx).
func (r *MariaDBReplication) SemiSyncCounts(tb testing.TB) (yes, no int) {
	tb.Helper()
	fmt.Sscan(globalStatus(tb, r.Primary, "Rpl_semi_sync_master_yes_tx"), &yes)
	fmt.Sscan(globalStatus(tb, r.Primary, "Rpl_semi_sync_master_no_tx"), &no)
	return yes, no
}
