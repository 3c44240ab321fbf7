package testdb

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// galeraProvider is where Debian's galera-4 (a dependency of
// mariadb-server) installs the wsrep provider.
var galeraProvider = "/usr/lib/galera/libgalera_smm.so"

// Galera is a MariaDB Galera cluster on loopback: every node a private
// MariaDB server of this package with wsrep on, the first one bootstrapping
// the cluster and the others joining it by an rsync state transfer (SST).
type Galera struct {
	Nodes  []*Server
	killed []int // indexes of the nodes Kill ended
}

// GaleraConfig says how StartGaleraWith starts a cluster.
type GaleraConfig struct {
	// Nodes is the number of nodes (at least 1).
	Nodes int
	// FakeClocks starts every node under libfaketime, so that a test sets
	// a node's clock apart from the others' while it runs (Server.Clock).
	FakeClocks bool
	// FastEviction makes the nodes declare a silent peer dead after about
	// 1.5 s and evict it after 3 s (evs.suspect_timeout and
	// evs.inactive_timeout; the defaults here are 5 s and 10 s): the
	// survivors of a node killed with kill -9 stall their commits only
	// that long.
	FastEviction bool
}

// StartGalera starts a cluster of n nodes and waits until every node is
// synced and sees n members. The nodes are stopped and removed in
// tb.Cleanup, the joiners first. A missing provider or rsync skips the
// test, or fails it under CI.
func StartGalera(tb testing.TB, n int) *Galera {
	tb.Helper()
	return StartGaleraWith(tb, GaleraConfig{Nodes: n})
}

// StartGaleraWith is StartGalera with the settings of c. Each node's
// clients connect with Nodes[i].DSN().
func StartGaleraWith(tb testing.TB, c GaleraConfig) *Galera {
	tb.Helper()
	n := c.Nodes
	b := findBinaries(MariaDB, false)
	if _, err := os.Stat(galeraProvider); err != nil {
		b.missing = append(b.missing, galeraProvider+" (galera-4)")
	}
	if lookBin("rsync") == "" {
		b.missing = append(b.missing, "rsync")
	}
	if c.FakeClocks && fakeTimeLib() == "" {
		b.missing = append(b.missing, "libfaketime (faketime)")
	}
	if err := b.err(MariaDB); err != nil {
		skipOrFail(tb, err)
	}
	timeouts := []string{"evs.suspect_timeout=PT5S", "evs.inactive_timeout=PT10S"}
	if c.FastEviction {
		timeouts = []string{"evs.keepalive_period=PT0.5S", "evs.inactive_check_period=PT0.5S",
			"evs.suspect_timeout=PT1.5S", "evs.inactive_timeout=PT3S", "evs.install_timeout=PT3S"}
	}
	g := &Galera{}
	var name string  // the cluster's name: at most 32 bytes
	var first string // the first node's group communication address
	for i := range n {
		gport, err1 := FreePort()
		ist, err2 := FreePort()
		sst, err3 := FreePort()
		if err1 != nil || err2 != nil || err3 != nil {
			tb.Fatalf("testdb: galera: free ports: %v %v %v", err1, err2, err3)
		}
		addr := hostPort(gport)
		cluster := "gcomm://"
		if i > 0 {
			cluster += first
		} else {
			first = addr
			name = fmt.Sprintf("ormlock-%d-%d", os.Getpid()%1000000, gport)
		}
		s, err := newServer(MariaDB, b, pgTarget{})
		if err == nil {
			s.extra = []string{
				"--wsrep-on=ON",
				"--wsrep-provider=" + galeraProvider,
				"--wsrep-cluster-name=" + name,
				"--wsrep-cluster-address=" + cluster,
				"--wsrep-node-name=node" + fmt.Sprint(i+1),
				"--wsrep-node-address=" + addr,
				"--wsrep-provider-options=" + strings.Join(append([]string{
					"gmcast.listen_addr=tcp://" + addr,
					"ist.recv_addr=" + hostPort(ist),
					"pc.recovery=FALSE", "gcache.size=32M",
				}, timeouts...), ";"),
				"--wsrep-sst-method=rsync",
				"--wsrep-sst-receive-address=" + hostPort(sst),
				"--binlog-format=ROW",
				"--default-storage-engine=InnoDB",
				"--innodb-autoinc-lock-mode=2",
			}
			// a joiner gets database "ormlock" with the state transfer,
			// and takes no statement before it is synced
			s.dbCreated = i > 0
			if c.FakeClocks {
				err = s.fakeClock()
			}
			if err == nil {
				err = s.start(false)
			}
			if err != nil {
				s.Close()
			}
		}
		node := stopAtCleanup(tb, s, err)
		g.Nodes = append(g.Nodes, node)
	}
	g.waitSynced(tb)
	return g
}

// Kill ends node i (from 0) at once with SIGKILL, as kill -9 or a crash
// would, and waits up to a minute until every other node is Synced in a
// primary component that no longer counts it. Its data dir stays until
// cleanup; the node is not restarted.
func (g *Galera) Kill(tb testing.TB, i int) {
	tb.Helper()
	g.Nodes[i].StopImmediate(tb)
	g.killed = append(g.killed, i)
	g.waitSynced(tb)
}

// Live are the nodes not killed, in order.
func (g *Galera) Live() []*Server {
	var live []*Server
	for i, s := range g.Nodes {
		if !g.isKilled(i) {
			live = append(live, s)
		}
	}
	return live
}

func (g *Galera) isKilled(i int) bool {
	for _, k := range g.killed {
		if k == i {
			return true
		}
	}
	return false
}

// waitSynced waits up to 2 minutes until every live node is Synced, ready,
// and counts every live node as a member.
func (g *Galera) waitSynced(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	live := g.Live()
	want := fmt.Sprint(len(live))
	for _, s := range live {
		for {
			state := globalStatus(tb, s, "wsrep_local_state_comment")
			ready := globalStatus(tb, s, "wsrep_ready")
			size := globalStatus(tb, s, "wsrep_cluster_size")
			if state == "Synced" && ready == "ON" && size == want {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("testdb: galera node on port %d: state %q, ready %q, cluster size %q after 2m; log:\n%s",
					s.Port(), state, ready, size, logTail(s.logPath, 0))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// Version is the MariaDB version of the first node (SELECT VERSION()).
func (g *Galera) Version(tb testing.TB) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var v string
	if err := g.Live()[0].DB(tb).QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		tb.Fatalf("testdb: galera: version: %v", err)
	}
	return v
}
