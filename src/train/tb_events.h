/* TensorBoard event files, written without TensorFlow: what Megatron's
 * --tensorboard-dir produces through torch's SummaryWriter, for scalars.
 *
 * DIR/events.out.tfevents.<10-digit unix time>.<host>.<pid>.0 is a sequence of
 * TFRecords:
 *   uint64 length | uint32 masked CRC-32C of those 8 bytes | data | uint32 masked CRC-32C of data
 * (little-endian; masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8), each data a
 * serialized tensorflow.Event protobuf:
 *   the first:  wall_time (1, double), file_version (3, string) "brain.Event:2"
 *   a scalar:   wall_time (1), step (2, int64),
 *               summary (5) { value (1) { tag (1, string), simple_value (2, float) } }
 * TensorBoard, tensorboard's EventAccumulator and tf.data.TFRecordDataset read it. */
#ifndef TD_TRAIN_TB_EVENTS_H
#define TD_TRAIN_TB_EVENTS_H

#include <stddef.h>
#include <stdint.h>

typedef struct td_tb_writer td_tb_writer;

/* Create dir (and parents) and a new event file in it, holding the file-version
 * event. NULL with err set (naming the path) when that fails. */
td_tb_writer *td_tb_open(const char *dir, char *err, size_t errlen);

/* Append one scalar event at step (wall time now). 0, or -1 with err set. */
int td_tb_scalar(td_tb_writer *w, const char *tag, double value, int64_t step, char *err,
                 size_t errlen);

/* Flush the records written so far to the file (TensorBoard reads them live). */
int td_tb_flush(td_tb_writer *w, char *err, size_t errlen);

/* The event file's path. */
const char *td_tb_path(const td_tb_writer *w);

void td_tb_close(td_tb_writer *w);

/* CRC-32C (Castagnoli) of n bytes, as TFRecord frames use it (before masking). */
uint32_t td_crc32c(const void *data, size_t n);

#endif
