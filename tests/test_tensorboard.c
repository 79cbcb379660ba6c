/* The TensorBoard writer's pieces: CRC32C against the standard check value and the test
   vectors of RFC 3720 (B.4), and an event file's exact bytes against records assembled here by
   hand from the TFRecord and protobuf specifications (only the wall times are taken from the
   file, and checked to lie within the test's run). tests/tensorboard.sh reads whole training
   runs back with an independent reader. */
#define _GNU_SOURCE
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mgt/tensorboard.h"
#include "testutil.h"

static void test_crc32c(void) {
  uint8_t b[32];
  T_CHECK(mgt_crc32c("123456789", 9) == 0xE3069283u, "CRC32C(\"123456789\") = %08x",
          mgt_crc32c("123456789", 9));
  T_CHECK(mgt_crc32c("", 0) == 0, "CRC32C of nothing");
  memset(b, 0, sizeof b);
  T_CHECK(mgt_crc32c(b, 32) == 0x8A9136AAu, "CRC32C of 32 zeros = %08x", mgt_crc32c(b, 32));
  memset(b, 0xFF, sizeof b);
  T_CHECK(mgt_crc32c(b, 32) == 0x62A8AB43u, "CRC32C of 32 0xFF = %08x", mgt_crc32c(b, 32));
  for (int i = 0; i < 32; i++)
    b[i] = (uint8_t)i;
  T_CHECK(mgt_crc32c(b, 32) == 0x46DD794Eu, "CRC32C of 0..31 = %08x", mgt_crc32c(b, 32));
}

static uint32_t masked(const uint8_t *p, size_t n) {
  uint32_t c = mgt_crc32c(p, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* Appends the TFRecord of `data` to out; returns the bytes appended. */
static size_t frame(uint8_t *out, const uint8_t *data, size_t n) {
  for (int i = 0; i < 8; i++)
    out[i] = (uint8_t)((uint64_t)n >> (8 * i));
  uint32_t h = masked(out, 8), d = masked(data, n);
  memcpy(out + 12, data, n);
  for (int i = 0; i < 4; i++) {
    out[8 + i] = (uint8_t)(h >> (8 * i));
    out[12 + n + i] = (uint8_t)(d >> (8 * i));
  }
  return n + 16;
}

static double wall_at(const uint8_t *p) {
  double w;
  memcpy(&w, p, 8); /* little-endian host */
  return w;
}

static void test_file(void) {
  char dir[] = "/tmp/mgt-tb-XXXXXX", sub[64], plain[64];
  T_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  snprintf(sub, sizeof sub, "%s/a/b", dir);
  const double t0 = (double)time(NULL);
  T_OK(mgt_tb_check_dir(sub));
  DIR *dd = opendir(sub);
  int entries = 0;
  for (struct dirent *e; dd && (e = readdir(dd));)
    entries += e->d_name[0] != '.' || strlen(e->d_name) > 2;
  if (dd) closedir(dd);
  T_CHECK(dd && entries == 0, "the checked directory holds %d entries (the probe left?)", entries);
  mgt_tb *w = NULL;
  T_OK(mgt_tb_create(sub, &w));
  char path[256];
  snprintf(path, sizeof path, "%s", mgt_tb_path(w));
  T_OK(mgt_tb_add(w, "loss", 2.5));
  T_OK(mgt_tb_commit(w, 300));
  T_OK(mgt_tb_commit(w, 301)); /* nothing added: nothing written */
  mgt_tb_destroy(&w);
  const double t1 = (double)time(NULL) + 1;
  T_CHECK(w == NULL, "destroy NULLs the writer");
  char host[256] = "", name_host[256] = "";
  gethostname(host, sizeof host);
  long long secs = 0;
  const char *name = strrchr(path, '/') + 1;
  T_CHECK(strncmp(path, sub, strlen(sub)) == 0 &&
              sscanf(name, "events.out.tfevents.%lld.%255s", &secs, name_host) == 2 &&
              strcmp(name_host, host) == 0 && t0 <= (double)secs && (double)secs <= t1,
          "file %s: want %s/events.out.tfevents.<seconds in [%.0f, %.0f]>.%s", path, sub, t0, t1,
          host);

  size_t n = 0;
  uint8_t *got = (uint8_t *)t_slurp(path, &n);
  /* Event{wall_time, step 0, file_version "brain.Event:2"}, then Event{wall_time, step 300,
     summary{value{tag "loss", simple_value 2.5f (0x40200000)}}} */
  uint8_t e1[64] = {0x09, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0x00, 0x1a, 13};
  memcpy(e1 + 13, "brain.Event:2", 13);
  const size_t n1 = 26;
  uint8_t e2[64] = {0x09, 0,  0,    0, 0,   0,   0,   0,   0,    0x10, 0xac, 0x02, 0x2a, 13,
                    0x0a, 11, 0x0a, 4, 'l', 'o', 's', 's', 0x15, 0x00, 0x00, 0x20, 0x40};
  const size_t n2 = 27;
  T_CHECK(got && n == n1 + n2 + 32, "event file of %zu bytes, want %zu", n, n1 + n2 + 32);
  if (got && n == n1 + n2 + 32) {
    memcpy(e1 + 1, got + 12 + 1, 8);
    memcpy(e2 + 1, got + 16 + n1 + 12 + 1, 8);
    const double w1 = wall_at(e1 + 1), w2 = wall_at(e2 + 1);
    T_CHECK(t0 - 1 <= w1 && w1 <= w2 && w2 <= t1, "wall times %.3f %.3f outside [%.0f, %.0f]", w1,
            w2, t0, t1);
    uint8_t want[160];
    size_t m = frame(want, e1, n1);
    m += frame(want + m, e2, n2);
    T_CHECK(m == n && memcmp(want, got, n) == 0, "the event file's bytes");
  }
  free(got);

  snprintf(plain, sizeof plain, "%s/plain", dir);
  FILE *f = fopen(plain, "w");
  if (f) fclose(f);
  snprintf(sub, sizeof sub, "%s/plain/tb", dir);
  mgt_status st = mgt_tb_check_dir(sub);
  T_CHECK(st == MGT_ERR_INPUT && strstr(mgt_error_message(), "--tensorboard-dir") &&
              strstr(mgt_error_message(), "Not a directory"),
          "a directory under a regular file: status %d, \"%s\"", st, mgt_error_message());
  mgt_error_clear();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  T_CHECK(system(cmd) == 0, "%s", cmd);
}

int main(void) {
  test_crc32c();
  test_file();
  return t_report("tensorboard");
}
