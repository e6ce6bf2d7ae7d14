/* JSON lines as Megatron's tools/preprocess_data.py reads them (the file decoded
 * as UTF-8, then json.loads on each line): the input of trident tokenize and
 * trident preprocess. One line holds one JSON object; a text is the string value
 * of one of its keys.
 *
 * A line is accepted exactly when Python would accept it:
 *   - valid UTF-8 (Python's decoding of the file fails otherwise);
 *   - JSON (RFC 8259) plus Python's NaN, Infinity and -Infinity; white space is
 *     space, tab, CR and LF only; no raw control characters (U+0000..U+001F)
 *     inside strings; a \u escape takes four hex digits; nesting at most
 *     TD_JSONL_MAX_DEPTH deep (Python's recursion limit);
 *   - a \u escape of a lone surrogate is accepted, as Python does, except in the
 *     text itself, which Megatron's tokenizer must encode as UTF-8;
 *   - a repeated key: the last value counts, as in a Python dict.
 * Messages name the byte offset in the line; the caller adds the file and line. */
#ifndef TD_DATA_JSONL_H
#define TD_DATA_JSONL_H

#include <stddef.h>

#define TD_JSONL_MAX_DEPTH 1000

/* The string value of key in the JSON object on one line s[0, len) (without its
 * newline), decoded to UTF-8: (*buf)[0, *n), NUL-terminated. *buf is a td_malloc'ed
 * buffer of *cap bytes that grows as needed (NULL and 0 to start; td_free it).
 * Returns 0, or -1 with err saying what is wrong and where, e.g.
 *   "malformed JSON at byte offset 12: expecting ',' delimiter"
 *   "invalid UTF-8 at byte offset 13 (byte 0xC3): truncated sequence"
 *   "NUL byte at byte offset 13", "malformed \u escape at byte offset 11 ..."
 *   "no key \"text\"", "no string value for the key \"text\" (it is a number)". */
int td_jsonl_get_string(const char *s, size_t len, const char *key, char **buf, size_t *cap,
                        size_t *n, char *err, size_t errlen);

#endif
