package lockproto

// Internals for the external tests.
var StatementTimeout = statementTimeout

var MySQLInTx = mysqlInTx
