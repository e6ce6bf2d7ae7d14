/* GPT-2 byte-level BPE (Megatron's --tokenizer-type GPT2BPETokenizer): token ids
 * equal to OpenAI's encoder (encoder.py / Megatron's gpt2_tokenization.py) for any
 * valid UTF-8 text, with the Python `regex` module's Unicode 15.0 classes.
 *
 * Encoding a text:
 *  1. pre-tokenize with GPT-2's pattern
 *       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *     (PCRE2, UTF + UCP, JIT), every piece a run of bytes;
 *  2. start each piece as its single-byte tokens and apply merges, lowest rank
 *     first, every non-overlapping occurrence left to right (encoder.py's bpe()),
 *     in memory linear in the piece (about 16 bytes a byte) and time about
 *     linear in its merges: a 30 MB word without spaces is one piece like any
 *     other (splitting it, as some tokenizers do, would change the ids);
 *  3. the pieces' ids, in order. A per-worker cache maps repeated pieces to ids.
 * `<|endoftext|>` written inside a text is ordinary text, as in Megatron; the
 * end-of-document id (td_bpe_eod) is appended by the caller. */
#ifndef TD_DATA_BPE_TOKENIZER_H
#define TD_DATA_BPE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct td_bpe td_bpe;               /* immutable after load, shareable across threads */
typedef struct td_bpe_worker td_bpe_worker; /* one per thread: piece cache, regex match data */

/* Load vocab.json (token -> id, GPT-2's byte alphabet) and merges.txt ("#version"
 * line, then one "A B" merge per line, rank = line order). Returns NULL with a
 * message naming the file and the problem on a missing or damaged file. */
td_bpe *td_bpe_load(const char *vocab_json_path, const char *merges_path, char *err, size_t errlen);
void td_bpe_free(td_bpe *bpe);

td_bpe_worker *td_bpe_worker_new(const td_bpe *bpe);
void td_bpe_worker_free(td_bpe_worker *w);

/* Encode len bytes of UTF-8, appending the ids to *ids (a td_malloc'ed array of
 * *cap entries holding *n; NULL / 0 / 0 to start; free with td_free). Returns 0,
 * or -1 with err naming the byte offset of invalid UTF-8 (nothing is appended);
 * len is at most INT32_MAX. */
int td_bpe_encode(td_bpe_worker *w, const char *text, size_t len, int32_t **ids, size_t *n,
                  size_t *cap, char *err, size_t errlen);

/* Decode ids to their bytes: *out is td_malloc'ed and NUL-terminated, *len bytes
 * (which need not be valid UTF-8 for an arbitrary id sequence). Returns 0, or -1
 * with err naming the position of an id outside [0, vocab size). */
int td_bpe_decode(const td_bpe *bpe, const int32_t *ids, size_t n, char **out, size_t *len,
                  char *err, size_t errlen);

int32_t td_bpe_eod(const td_bpe *bpe);        /* id of <|endoftext|>: 50256 for GPT-2 */
int64_t td_bpe_vocab_size(const td_bpe *bpe); /* entries in vocab.json: 50257 for GPT-2 */

/* Check that s[0, len) is UTF-8 as Unicode defines it (no overlong forms, no
 * surrogates, nothing above U+10FFFF, no truncated sequence). Returns 0, or -1
 * with *bad_offset = the first byte of the offending sequence and *why a short
 * reason ("overlong encoding", ...). */
int td_utf8_validate(const char *s, size_t len, size_t *bad_offset, const char **why);

/* Bytes in the UTF-8 character at s[0, n), n >= 1; when it is not valid, minus
 * the length of its maximal invalid prefix (>= 1): the unit that Unicode's
 * "substitution of maximal subparts" (and Python's errors='replace') turns into
 * one U+FFFD. */
int td_utf8_char_len(const char *s, size_t n);

#endif
