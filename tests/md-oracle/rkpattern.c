/*
 * rkpattern: the deterministic data generator used inside the md oracle VM.
 *
 * The byte at absolute device offset p, for seed s, is byte (p % 8) of the little-endian
 * 64-bit word  mix64(floor(p / 8) ^ mix64(s)),  where mix64 is the SplitMix64 finaliser.
 * The stream depends only on (seed, absolute offset), so any sub-range can be regenerated
 * on the host (crates/oracle/src/pattern.rs implements the same function) without state.
 *
 *   rkpattern write DEVICE SEED OFFSET LEN    write the pattern over [OFFSET, OFFSET+LEN)
 *
 * OFFSET and LEN must be multiples of 512 (md block devices are written through the page
 * cache; alignment keeps the partial-stripe write a pure sub-stripe write). Exit status is
 * non-zero on any short write or I/O error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end = NULL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno != 0 || end == s || *end != '\0')
		return -1;
	*out = (uint64_t)v;
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t seed, offset, len;
	if (argc != 6 || strcmp(argv[1], "write") != 0 || parse_u64(argv[3], &seed) ||
	    parse_u64(argv[4], &offset) || parse_u64(argv[5], &len)) {
		fprintf(stderr, "usage: rkpattern write DEVICE SEED OFFSET LEN\n");
		return 2;
	}
	if (offset % 512 != 0 || len % 512 != 0) {
		fprintf(stderr, "rkpattern: OFFSET and LEN must be multiples of 512\n");
		return 2;
	}
	int fd = open(argv[2], O_WRONLY);
	if (fd < 0) {
		perror(argv[2]);
		return 1;
	}
	const size_t block = 1 << 20;
	unsigned char *buf = malloc(block);
	if (buf == NULL) {
		perror("malloc");
		return 1;
	}
	uint64_t key = mix64(seed);
	uint64_t done = 0;
	while (done < len) {
		size_t n = (len - done) < block ? (size_t)(len - done) : block;
		uint64_t base = offset + done;
		for (size_t i = 0; i < n; i += 8) {
			uint64_t w = mix64(((base + i) / 8) ^ key);
			for (int b = 0; b < 8; b++)
				buf[i + b] = (unsigned char)(w >> (8 * b));
		}
		size_t put = 0;
		while (put < n) {
			ssize_t r = pwrite(fd, buf + put, n - put, (off_t)(base + put));
			if (r <= 0) {
				perror("rkpattern: pwrite");
				return 1;
			}
			put += (size_t)r;
		}
		done += n;
	}
	if (fsync(fd) != 0) {
		perror("rkpattern: fsync");
		return 1;
	}
	close(fd);
	free(buf);
	return 0;
}
