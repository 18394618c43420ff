// Package sqlitedb opens the SQLite databases of the embedded backend with
// the settings they all need: a pure-Go driver, WAL journaling, immediate
// write transactions and a busy timeout, so that several goroutines and
// several processes can share one data directory safely.
package sqlitedb

import (
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"modernc.org/sqlite" // registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"
)

// Open opens (creating if needed) the database file at path, creates its
// parent directory, and applies schema (idempotent DDL) in one transaction.
func Open(path, schema string) (*sql.DB, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("sqlitedb: create directory for %s: %w", path, err)
	}
	q := url.Values{}
	for _, p := range []string{"busy_timeout(10000)", "journal_mode(WAL)", "synchronous(NORMAL)", "foreign_keys(ON)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlitedb: open %s: %w", path, err)
	}
	// One connection per process: SQLite serialises writers anyway, and a
	// single connection avoids lock upgrades between connections of one pool.
	db.SetMaxOpenConns(1)
	// Switching a new file to WAL needs an exclusive lock and ignores the
	// busy timeout, so two processes opening one new file can collide: retry.
	for attempt := 1; ; attempt++ {
		_, err = db.Exec(schema)
		if err == nil {
			return db, nil
		}
		if !busy(err) || attempt == 100 {
			db.Close()
			return nil, fmt.Errorf("sqlitedb: apply schema to %s: %w", path, err)
		}
		time.Sleep(time.Duration(attempt) * 10 * time.Millisecond)
	}
}

func busy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}
