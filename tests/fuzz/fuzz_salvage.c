/* fuzz_salvage — a COIL_SALVAGE open (the superblock scan, the layout
 * rebuilt from a found checkpoint, the checkpoint fallbacks, the journal
 * scan and a lenient replay) of a store image built from the input, then
 * every object listed and read.  Nothing may crash; open fails with a
 * negative errno or succeeds, and reads give bytes or -EIO.
 *
 * The image is an 8 MiB store of zeros (the smallest that holds data); input byte 0
 * chooses where the rest lands (superblocks and journal, checkpoint area
 * 0 or 1, data area), byte 1 may cut the image short (a truncated file).
 * Blocks that start with a coil magic get their checksums fixed up on the
 * copy, so the fuzzer reaches what lies behind them.
 *
 * The seeds (corpus/salvage/) are pieces of a real store, each behind its
 * two selector bytes: `coil create s.coil 8M`, `coil put s.coil obj F`,
 * `coil put -c none s.coil raw F` (F: 14 KB of text), then the first 24
 * KiB (window 0), the first 8 KiB of each checkpoint area (windows 1 and
 * 2), 16 KiB of the data area (window 3), and the superblocks alone with
 * the image cut at 40/128 of its size. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "coil.h"
#include "fuzz_common.h"

#define IMG_SIZE (8u << 20)

static int img_fd = -1;
static char img_path[64];
static struct fmt_super lay;
static uint8_t *copy;

static void fix_block(uint8_t *b, size_t avail)
{
	if (avail >= FMT_BLOCK && !memcmp(b, "COILSUPR", 8)) {
		coil_put_le64(b + FMT_SUPER_CSUM_OFF,
			      fmt_csum(b, FMT_SUPER_CSUM_OFF));
	} else if (avail >= FMT_BLOCK && !memcmp(b, "CCKP", 4)) {
		uint64_t pl = coil_get_le64(b + 24);

		if (pl <= avail - FMT_BLOCK)
			coil_put_le64(b + 32, fmt_csum(b + FMT_BLOCK, pl));
		coil_put_le64(b + FMT_CKPT_CSUM_OFF,
			      fmt_csum(b, FMT_CKPT_CSUM_OFF));
	} else if (avail >= FMT_JCHUNK_HDR && !memcmp(b, "CJNL", 4)) {
		uint32_t pl = coil_get_le32(b + 28);

		if (pl <= avail - FMT_JCHUNK_HDR)
			coil_put_le64(b + 40, fmt_csum(b + FMT_JCHUNK_HDR, pl));
		coil_put_le64(b + 56, fmt_csum(b, 56));
	}
}

static int read_all(void *arg, const char *name, size_t len, uint64_t size)
{
	coil_store *s = arg;
	static uint8_t buf[65536];
	coil_obj *h;

	(void)len;
	if (coil_obj_open(s, name, 0, &h) < 0)
		return 0;
	for (uint64_t off = 0; off < size && off < (1u << 20);
	     off += sizeof(buf)) {
		int64_t n = coil_pread(h, buf, sizeof(buf), off);

		FUZZ_CHECK(n >= 0 || n == -EIO);
	}
	coil_obj_close(h);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct coil_options o;
	uint64_t base, end;
	coil_store *s;
	size_t n;
	int rc;

	if (img_fd < 0) {
		img_fd = memfd_create("coil-fuzz-salvage", 0);
		FUZZ_CHECK(img_fd >= 0);
		snprintf(img_path, sizeof(img_path), "/proc/self/fd/%d", img_fd);
		FUZZ_CHECK(fmt_super_layout(IMG_SIZE, 65536, &lay) == 0);
		copy = malloc(IMG_SIZE);
		FUZZ_CHECK(copy != NULL);
	}
	if (size < 2)
		return 0;
	switch (data[0] % 4) {
	case 0: base = 0; break;
	case 1: base = lay.ckpt_off[0]; break;
	case 2: base = lay.ckpt_off[1]; break;
	default: base = lay.data_off; break;
	}
	end = IMG_SIZE;
	if (data[1] & 0x80)
		end = (uint64_t)(data[1] & 0x7f) * (IMG_SIZE / 128);
	n = size - 2;
	if (n > IMG_SIZE - base)
		n = IMG_SIZE - base;
	memcpy(copy, data + 2, n);
	for (size_t b = 0; b < n; b += FMT_BLOCK)
		fix_block(copy + b, n - b);
	FUZZ_CHECK(ftruncate(img_fd, 0) == 0);
	FUZZ_CHECK(ftruncate(img_fd, IMG_SIZE) == 0);
	if (n)
		FUZZ_CHECK(pwrite(img_fd, copy, n, (off_t)base) == (ssize_t)n);
	FUZZ_CHECK(ftruncate(img_fd, (off_t)end) == 0);

	coil_options_init(&o);
	o.flags = COIL_SALVAGE | COIL_NO_DIRECT;
	o.workers = 1;
	o.prefetch = 0;
	o.cache_bytes = 0;
	o.scrub_interval = 0;
	rc = coil_open(img_path, &o, &s);
	FUZZ_CHECK(rc <= 0);
	if (rc < 0)
		return 0;
	FUZZ_CHECK(coil_obj_list(s, read_all, s) == 0);
	FUZZ_CHECK(coil_stats_json(s, NULL, 0) > 0);
	FUZZ_CHECK(coil_close(s) == 0);
	return 0;
}
