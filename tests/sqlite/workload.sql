-- tests/sqlite/workload.sql: the scripted workload the tests and
-- perf/bench_sqlite.sh run on the default VFS and on coil.  Deterministic
-- (no random()), so both runs must end with the same content.  @N@ is the
-- row count of the bulk insert; the rest scales with it.
CREATE TABLE kv(id INTEGER PRIMARY KEY, k TEXT NOT NULL, v TEXT, n INTEGER, b BLOB);
CREATE TABLE log(id INTEGER PRIMARY KEY, kv_id INTEGER, note TEXT);
-- bulk insert, one transaction
BEGIN;
WITH RECURSIVE c(x) AS (VALUES(1) UNION ALL SELECT x + 1 FROM c WHERE x < @N@)
INSERT INTO kv(id, k, v, n, b)
  SELECT x, printf('key-%08d', (x * 7919) % 1000003),
         printf('row %d of the coil sqlite workload: %s', x,
                substr('lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt', 1 + x % 50, 40)),
         (x * 2654435761) % 1000,
         CASE WHEN x % 7 = 0 THEN zeroblob(200 + x % 300) ELSE NULL END
  FROM c;
COMMIT;
-- indexes
CREATE INDEX kv_k ON kv(k);
CREATE INDEX kv_n ON kv(n, id);
-- updates and deletes in transactions
BEGIN;
UPDATE kv SET v = v || ' (updated)', n = n + 1 WHERE id % 3 = 0;
INSERT INTO log(kv_id, note) SELECT id, 'updated ' || k FROM kv WHERE id % 3 = 0 AND id % 11 = 0;
COMMIT;
BEGIN;
DELETE FROM kv WHERE id % 5 = 0;
DELETE FROM kv WHERE n BETWEEN 100 AND 149;
COMMIT;
BEGIN;
UPDATE kv SET b = zeroblob(1000 + id % 3000) WHERE id % 13 = 0;
ROLLBACK;
-- small transactions, one commit each
UPDATE kv SET n = n + 1, v = v || '.' WHERE id = ((1 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 2, v = v || '.' WHERE id = ((2 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 3, v = v || '.' WHERE id = ((3 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 4, v = v || '.' WHERE id = ((4 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 5, v = v || '.' WHERE id = ((5 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 6, v = v || '.' WHERE id = ((6 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 7, v = v || '.' WHERE id = ((7 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 8, v = v || '.' WHERE id = ((8 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 9, v = v || '.' WHERE id = ((9 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 10, v = v || '.' WHERE id = ((10 * 7727) % (@N@ / 2)) * 2 + 1;
INSERT INTO log(kv_id, note) VALUES (10, 'small transaction 10');
UPDATE kv SET n = n + 11, v = v || '.' WHERE id = ((11 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 12, v = v || '.' WHERE id = ((12 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 13, v = v || '.' WHERE id = ((13 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 14, v = v || '.' WHERE id = ((14 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 15, v = v || '.' WHERE id = ((15 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 16, v = v || '.' WHERE id = ((16 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 17, v = v || '.' WHERE id = ((17 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 18, v = v || '.' WHERE id = ((18 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 19, v = v || '.' WHERE id = ((19 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 20, v = v || '.' WHERE id = ((20 * 7727) % (@N@ / 2)) * 2 + 1;
INSERT INTO log(kv_id, note) VALUES (20, 'small transaction 20');
UPDATE kv SET n = n + 21, v = v || '.' WHERE id = ((21 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 22, v = v || '.' WHERE id = ((22 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 23, v = v || '.' WHERE id = ((23 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 24, v = v || '.' WHERE id = ((24 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 25, v = v || '.' WHERE id = ((25 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 26, v = v || '.' WHERE id = ((26 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 27, v = v || '.' WHERE id = ((27 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 28, v = v || '.' WHERE id = ((28 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 29, v = v || '.' WHERE id = ((29 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 30, v = v || '.' WHERE id = ((30 * 7727) % (@N@ / 2)) * 2 + 1;
INSERT INTO log(kv_id, note) VALUES (30, 'small transaction 30');
UPDATE kv SET n = n + 31, v = v || '.' WHERE id = ((31 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 32, v = v || '.' WHERE id = ((32 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 33, v = v || '.' WHERE id = ((33 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 34, v = v || '.' WHERE id = ((34 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 35, v = v || '.' WHERE id = ((35 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 36, v = v || '.' WHERE id = ((36 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 37, v = v || '.' WHERE id = ((37 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 38, v = v || '.' WHERE id = ((38 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 39, v = v || '.' WHERE id = ((39 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 40, v = v || '.' WHERE id = ((40 * 7727) % (@N@ / 2)) * 2 + 1;
INSERT INTO log(kv_id, note) VALUES (40, 'small transaction 40');
UPDATE kv SET n = n + 41, v = v || '.' WHERE id = ((41 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 42, v = v || '.' WHERE id = ((42 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 43, v = v || '.' WHERE id = ((43 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 44, v = v || '.' WHERE id = ((44 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 45, v = v || '.' WHERE id = ((45 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 46, v = v || '.' WHERE id = ((46 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 47, v = v || '.' WHERE id = ((47 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 48, v = v || '.' WHERE id = ((48 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 49, v = v || '.' WHERE id = ((49 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 50, v = v || '.' WHERE id = ((50 * 7727) % (@N@ / 2)) * 2 + 1;
INSERT INTO log(kv_id, note) VALUES (50, 'small transaction 50');
UPDATE kv SET n = n + 51, v = v || '.' WHERE id = ((51 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 52, v = v || '.' WHERE id = ((52 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 53, v = v || '.' WHERE id = ((53 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 54, v = v || '.' WHERE id = ((54 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 55, v = v || '.' WHERE id = ((55 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 56, v = v || '.' WHERE id = ((56 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 57, v = v || '.' WHERE id = ((57 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 58, v = v || '.' WHERE id = ((58 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 59, v = v || '.' WHERE id = ((59 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 60, v = v || '.' WHERE id = ((60 * 7727) % (@N@ / 2)) * 2 + 1;
INSERT INTO log(kv_id, note) VALUES (60, 'small transaction 60');
UPDATE kv SET n = n + 61, v = v || '.' WHERE id = ((61 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 62, v = v || '.' WHERE id = ((62 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 63, v = v || '.' WHERE id = ((63 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 64, v = v || '.' WHERE id = ((64 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 65, v = v || '.' WHERE id = ((65 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 66, v = v || '.' WHERE id = ((66 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 67, v = v || '.' WHERE id = ((67 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 68, v = v || '.' WHERE id = ((68 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 69, v = v || '.' WHERE id = ((69 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 70, v = v || '.' WHERE id = ((70 * 7727) % (@N@ / 2)) * 2 + 1;
INSERT INTO log(kv_id, note) VALUES (70, 'small transaction 70');
UPDATE kv SET n = n + 71, v = v || '.' WHERE id = ((71 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 72, v = v || '.' WHERE id = ((72 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 73, v = v || '.' WHERE id = ((73 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 74, v = v || '.' WHERE id = ((74 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 75, v = v || '.' WHERE id = ((75 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 76, v = v || '.' WHERE id = ((76 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 77, v = v || '.' WHERE id = ((77 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 78, v = v || '.' WHERE id = ((78 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 79, v = v || '.' WHERE id = ((79 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 80, v = v || '.' WHERE id = ((80 * 7727) % (@N@ / 2)) * 2 + 1;
INSERT INTO log(kv_id, note) VALUES (80, 'small transaction 80');
UPDATE kv SET n = n + 81, v = v || '.' WHERE id = ((81 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 82, v = v || '.' WHERE id = ((82 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 83, v = v || '.' WHERE id = ((83 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 84, v = v || '.' WHERE id = ((84 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 85, v = v || '.' WHERE id = ((85 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 86, v = v || '.' WHERE id = ((86 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 87, v = v || '.' WHERE id = ((87 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 88, v = v || '.' WHERE id = ((88 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 89, v = v || '.' WHERE id = ((89 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 90, v = v || '.' WHERE id = ((90 * 7727) % (@N@ / 2)) * 2 + 1;
INSERT INTO log(kv_id, note) VALUES (90, 'small transaction 90');
UPDATE kv SET n = n + 91, v = v || '.' WHERE id = ((91 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 92, v = v || '.' WHERE id = ((92 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 93, v = v || '.' WHERE id = ((93 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 94, v = v || '.' WHERE id = ((94 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 95, v = v || '.' WHERE id = ((95 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 96, v = v || '.' WHERE id = ((96 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 97, v = v || '.' WHERE id = ((97 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 98, v = v || '.' WHERE id = ((98 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 99, v = v || '.' WHERE id = ((99 * 7727) % (@N@ / 2)) * 2 + 1;
UPDATE kv SET n = n + 100, v = v || '.' WHERE id = ((100 * 7727) % (@N@ / 2)) * 2 + 1;
INSERT INTO log(kv_id, note) VALUES (100, 'small transaction 100');
-- grow, then shrink with VACUUM
BEGIN;
INSERT INTO kv(id, k, v, n) SELECT id + @N@, 'copy-' || k, v, n FROM kv WHERE id % 2 = 1;
COMMIT;
DELETE FROM kv WHERE id > @N@ AND id % 4 != 1;
VACUUM;
SELECT 'summary', count(*), sum(n), sum(length(v)), sum(length(b)) FROM kv;
