/* TensorBoard event files (log.tensorboard = true): rank 0 writes the
 * scalars of metrics.jsonl and steps.jsonl, as they are written there, to
 * RUN_DIR/tb/events.out.tfevents.<unix time>.<host>.<pid>, which
 * `tensorboard --logdir RUN_DIR/tb` and W&B's TensorBoard sync read.
 *
 * A file is TFRecord framing around Event messages (proto/tfevent.proto):
 * per record a uint64 little-endian length, the masked CRC-32C of those 8
 * bytes, the data, the masked CRC-32C of the data. The first Event carries
 * file_version "brain.Event:2"; each later one the wall time, the global
 * step and a Summary of simple (float) values, one Event per record line.
 *
 *     struct ct_tb *tb = ct_tb_open(run_dir, 1, resumed_in_place, step);
 *     ct_tb_steps(tb, &step_rec);     // after steps.jsonl's line
 *     ct_tb_epoch(tb, &epoch_rec);    // after metrics.jsonl's line
 *     ct_tb_close(tb);
 *
 * Event files are a view for people, not a record the run depends on: any
 * error (a tb/ that cannot be made, a full disk) is one warning naming the
 * file, after which the writer stops and training goes on; the functions
 * take NULL (no writer) and do nothing.
 *
 * A run continued in place (--resume auto in its own directory) adds a new
 * file. Before that, each earlier file is cut after its last record at or
 * below the resumed step (the steps after the checkpoint are about to be
 * redone, as metrics.jsonl and steps.jsonl are trimmed), and a torn last
 * record is cut too, so that no (tag, step) is written twice across the
 * files. Records are appended in step order, so the cut is one truncate.
 *
 * Deliberately not here: which values a row holds (run/record.h's records)
 * and when rows are written (src/train/trainer.c).
 */
#ifndef CT_RUN_TBEVENTS_H
#define CT_RUN_TBEVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "run/record.h"

struct ct_tb;

/* Open a new event file in <run_dir>/tb (made if missing) and write its
 * file_version record durably. With resumed_in_place, first cut the earlier
 * files to steps <= step (ct_tb_trim), also when !enabled (a run that
 * continues without events must not leave the abandoned steps of an earlier
 * try behind for a later run with events). NULL when !enabled, after a
 * warning, or when out of memory. */
struct ct_tb *ct_tb_open(const char *run_dir, int enabled, int resumed_in_place, int64_t step);
/* One Event per row, appended and fsync'd: steps.jsonl's (train/loss,
 * train/acc, lr, throughput/tokens_per_s) and metrics.jsonl's (see the tag
 * table in tbevents.c and docs/records.md). Values are rounded as the JSON
 * line writes them; a null (NaN) or unwritten key is left out. */
void ct_tb_steps(struct ct_tb *tb, const struct ct_step_record *r);
void ct_tb_epoch(struct ct_tb *tb, const struct ct_epoch_record *r);
void ct_tb_close(struct ct_tb *tb);

/* The framing of one record: 12 bytes of header before the data and 4
 * after it. ct_tb_frame writes header and footer around len bytes already
 * at rec + CT_TB_HEADER. */
#define CT_TB_HEADER 12
#define CT_TB_FOOTER 4
void ct_tb_frame(uint8_t *rec, size_t len);

/* Cut the event file at path after its last whole record (both CRCs right,
 * the Event parses) whose step is <= max_step; the file_version record is
 * kept. Records past that point, or from a torn or corrupt one on, are
 * removed (ftruncate, fsync); *cut (may be NULL) says how many bytes. An
 * error names the file. */
int ct_tb_trim(const char *path, int64_t max_step, uint64_t *cut);

#endif
