#define _GNU_SOURCE
/* The training-data loader against a direct reading of the token array. The test writes its
   own datasets with the HDF5 API, following docs/data-format.md, with token = 1000 * document
   + position, so every token says where it came from. Checked: each sample is seq_length + 1
   consecutive tokens of documents of its split joined end to start; every token of the train
   split is covered; train and valid never mix; the same seed gives the same samples (from
   the cached index too), another seed another order; blending follows its weights. */
#include <dirent.h>
#include <hdf5.h>
#include <mpi.h>
#include <string.h>
#include <unistd.h>

#include "mgt/dataset.h"
#include "testutil.h"

enum { NDOC = 200, SEQ = 16 };

static int doc_len(int d) { return 1 + (d * 37) % 50; }

static void attr_i64(hid_t f, const char *n, int64_t v) {
  hid_t s = H5Screate(H5S_SCALAR), a = H5Acreate2(f, n, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT64, &v);
  H5Aclose(a), H5Sclose(s);
}

static void attr_str(hid_t f, const char *n, const char *v) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, strlen(v));
  hid_t s = H5Screate(H5S_SCALAR), a = H5Acreate2(f, n, t, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, t, v);
  H5Aclose(a), H5Sclose(s), H5Tclose(t);
}

/* The loss mask of the datasets written with one: every third token of a document does not
   train. */
static int trains(int j) { return j % 3 != 0; }

/* Writes PREFIX.h5 with NDOC ramp documents; tokens offset by `base`; with `mask` a loss mask
   (format 2, as mgt preprocess --chat-template writes). */
static void write_dataset_mask(const char *prefix, uint32_t base, int complete, int mask) {
  /* mask 2: format 2 without the loss_mask; 3: a loss_mask one byte short */
  char path[512];
  snprintf(path, sizeof path, "%s.h5", prefix);
  int64_t off[NDOC + 1];
  off[0] = 0;
  for (int d = 0; d < NDOC; d++)
    off[d + 1] = off[d] + doc_len(d);
  uint32_t *tok = malloc(sizeof(uint32_t) * (size_t)off[NDOC]);
  uint32_t mx = 0;
  for (int d = 0; d < NDOC; d++)
    for (int j = 0; j < doc_len(d); j++) {
      tok[off[d] + j] = base + (uint32_t)(1000 * d + j);
      if (tok[off[d] + j] > mx) mx = tok[off[d] + j];
    }
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t n = (hsize_t)off[NDOC], nd = NDOC + 1;
  hid_t s = H5Screate_simple(1, &n, NULL);
  hid_t ds = H5Dcreate2(f, "tokens", H5T_STD_U32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(ds, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, tok);
  H5Dclose(ds), H5Sclose(s);
  s = H5Screate_simple(1, &nd, NULL);
  ds = H5Dcreate2(f, "document_offsets", H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, off);
  H5Dclose(ds), H5Sclose(s);
  if (mask == 1 || mask == 3) {
    uint8_t *m = malloc((size_t)off[NDOC]);
    for (int d = 0; d < NDOC; d++)
      for (int j = 0; j < doc_len(d); j++)
        m[off[d] + j] = (uint8_t)trains(j);
    hsize_t nt = (hsize_t)off[NDOC] - (mask == 3);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_layout(dcpl, H5D_CONTIGUOUS);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    s = H5Screate_simple(1, &nt, NULL);
    ds = H5Dcreate2(f, "loss_mask", H5T_STD_U8LE, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, m);
    H5Dclose(ds), H5Sclose(s), H5Pclose(dcpl);
    free(m);
  }
  if (mask) {
    attr_str(f, "chat_template", "llama3");
    attr_i64(f, "n_trained", 0);
  }
  attr_str(f, "format", mask ? "megatron-c tokens 2" : "megatron-c tokens 1");
  attr_str(f, "tokenizer", "TestTokenizer");
  attr_str(f, "vocab_hash", "0000");
  attr_i64(f, "vocab_size", 1000000);
  attr_i64(f, "eod_id", 999999);
  attr_i64(f, "append_eod", 0);
  attr_str(f, "json_key", "text");
  attr_i64(f, "n_tokens", off[NDOC]);
  attr_i64(f, "n_documents", NDOC);
  attr_i64(f, "max_token_id", mx);
  if (complete) attr_i64(f, "complete", 1);
  H5Fclose(f);
  free(tok);
}

static void write_dataset(const char *prefix, uint32_t base, int complete) {
  write_dataset_mask(prefix, base, complete, 0);
}

static mgt_config config(const char *data_path, uint64_t seed) {
  mgt_config c;
  mgt_config_defaults(&c);
  snprintf(c.data_path, sizeof c.data_path, "%s", data_path);
  strcpy(c.split, "80,20,0");
  c.seq_length = SEQ;
  c.micro_batch_size = 4;
  c.global_batch_size = 8;
  c.train_iters = 50; /* 400 samples: more than one epoch of the train split */
  c.eval_iters = 5;
  c.seed = seed;
  c.vocab_size = 1000000;
  c.mock_data = 0;
  return c;
}

/* Checks every sample of a source; counts coverage of (doc, pos) in cover (may be NULL). */
static void check_samples(mgt_data *src, int n, int lo_doc, int hi_doc, uint32_t base, int *cover,
                          const char *what) {
  int32_t buf[SEQ + 1];
  int bad = 0;
  for (int s = 0; s < n && !bad; s++) {
    T_OK(src->get(src->ctx, (uint64_t)s, 1, SEQ, buf));
    for (int k = 0; k <= SEQ; k++) {
      int v = buf[k] - (int)base, d = v / 1000, j = v % 1000;
      if (d < lo_doc || d >= hi_doc || j >= doc_len(d)) {
        bad = 1;
        T_CHECK(0, "%s sample %d token %d = %d is not from a document of the split [%d, %d)", what,
                s, k, buf[k], lo_doc, hi_doc);
        break;
      }
      if (cover && k < SEQ) cover[d * 64 + j]++;
      if (k == 0) continue;
      int pv = buf[k - 1] - (int)base, pd = pv / 1000, pj = pv % 1000;
      int inside = d == pd && j == pj + 1;
      int joined = pj == doc_len(pd) - 1 && j == 0;
      if (!inside && !joined) {
        bad = 1;
        T_CHECK(0, "%s sample %d: %d follows %d, neither the next token nor a document start", what,
                s, buf[k], buf[k - 1]);
      }
    }
  }
}

/* --sft's packed samples of the masked dataset at `path` under each long-document policy: each
   sample is whole pieces of documents of the train split, each piece flagged as a document start
   and its tokens' loss as the mask says, then padding that trains nothing; over the samples
   read, every document's targets come equally often (once per pass: none lost, none twice; a
   split document's last pass may stop inside it), documents too long are cut at SEQ + 1 tokens,
   dropped, or split so that every target is in exactly one piece, and the passes of two documents
   differ by at most one. */
static void test_packing(const char *path) {
  static const char *names[3] = {"truncate", "drop", "split"};
  for (int policy = 0; policy < 3; policy++) {
    mgt_config c = config(path, 7);
    c.sft = 1, c.sft_long_policy = policy;
    mgt_data train, valid;
    T_OK(mgt_dataset_sources(&c, MPI_COMM_WORLD, NULL, &train, &valid));
    int *seen = calloc(NDOC * 64, sizeof(int)); /* (document, token) as a trained position */
    int32_t row[SEQ + 1];
    int bad = 0;
    for (int s = 0; s < 400 && !bad; s++) {
      T_OK(train.get(train.ctx, (uint64_t)s, 1, SEQ, row));
      int k = 0;
      for (; k <= SEQ && !bad; k++) {
        const int v = row[k] & MGT_TOKEN_ID, d = v / 1000, j = v % 1000;
        const int start = (row[k] & MGT_TOKEN_DOC_START) != 0;
        if (v == 999999) break; /* the padding */
        const int prev = k ? (row[k - 1] & MGT_TOKEN_ID) : -1;
        const int follows = k && prev / 1000 == d && prev % 1000 == j - 1;
        if (d >= 160 || j >= doc_len(d) || start == follows ||
            ((row[k] & MGT_TOKEN_NO_LOSS) != 0) == trains(j) || (start && j != 0 && policy != 2)) {
          bad = 1;
          T_CHECK(0, "%s: sample %d token %d (%d, flags %x) is no piece of a train document",
                  names[policy], s, k, v, (unsigned)row[k] >> 29);
        }
        if (!start) seen[d * 64 + j]++;
      }
      for (int first = k; k <= SEQ && !bad; k++)
        if ((row[k] & MGT_TOKEN_ID) != 999999 || !(row[k] & MGT_TOKEN_NO_LOSS) ||
            (k == first) != ((row[k] & MGT_TOKEN_DOC_START) != 0)) {
          bad = 1;
          T_CHECK(0, "%s: sample %d: padding %x at %d after %d tokens", names[policy], s,
                  (unsigned)row[k], k, first);
        }
    }
    int lo = 1 << 30, hi = 0;
    for (int d = 0; d < 160 && !bad; d++) {
      const int n = doc_len(d), cut = policy == 0 && n > SEQ + 1 ? SEQ + 1 : n;
      if (n < 2 || (policy == 1 && n > SEQ + 1)) {
        for (int j = 0; j < n; j++)
          T_CHECK(seen[d * 64 + j] == 0, "%s: document %d token %d placed", names[policy], d, j);
        continue;
      }
      /* the samples read may end inside the pieces of a split document: its last pass then
         holds the targets up to a point */
      const int times = seen[d * 64 + 1];
      for (int j = 1; j < n; j++)
        if (j < cut ? seen[d * 64 + j] > seen[d * 64 + j - (j > 1)] ||
                          seen[d * 64 + j] < times - (policy == 2)
                    : seen[d * 64 + j] != 0) {
          T_CHECK(0, "%s: document %d (%d tokens): target %d placed %d times, target 1 %d",
                  names[policy], d, n, j, seen[d * 64 + j], times);
          break;
        }
      lo = times < lo ? times : lo, hi = times > hi ? times : hi;
    }
    T_CHECK(lo >= 1 && hi - lo <= 1, "%s: documents placed between %d and %d times", names[policy],
            lo, hi);
    printf("packing, %s: every document's targets %d or %d times over 400 samples\n", names[policy],
           lo, hi);
    free(seen);
    mgt_data_destroy(&train), mgt_data_destroy(&valid);
  }
  mgt_config c = config(path, 7); /* a loss mask needs --sft */
  mgt_data t2, v2;
  mgt_status st = mgt_dataset_sources(&c, MPI_COMM_WORLD, NULL, &t2, &v2);
  T_CHECK(st == MGT_ERR_INPUT && strstr(mgt_error_message(), "train them with --sft"),
          "a masked dataset without --sft: %s", mgt_error_message());
  /* format 2 without its mask, or with one of another length: refused, the file named */
  static const char *const why[2] = {"without its loss_mask", "loss_mask is not one contiguous"};
  for (int k = 0; k < 2; k++) {
    char bad[300];
    snprintf(bad, sizeof bad, "%s_bad%d", path, k);
    write_dataset_mask(bad, 0, 1, 2 + k);
    c = config(bad, 7);
    c.sft = 1;
    st = mgt_dataset_sources(&c, MPI_COMM_WORLD, NULL, &t2, &v2);
    T_CHECK(st == MGT_ERR_INPUT && strstr(mgt_error_message(), why[k]) &&
                strstr(mgt_error_message(), "_bad"),
            "a damaged loss mask: %s", mgt_error_message());
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  char dir[] = "/tmp/mgt_test_dataset_XXXXXX";
  T_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  char a[256], b[256], bad[256], blend_path[600];
  snprintf(a, sizeof a, "%s/a", dir);
  snprintf(b, sizeof b, "%s/b", dir);
  snprintf(bad, sizeof bad, "%s/incomplete", dir);
  write_dataset(a, 0, 1);
  write_dataset(b, 500000, 1);
  write_dataset(bad, 0, 0);
  char masked[256];
  snprintf(masked, sizeof masked, "%s/masked", dir);
  write_dataset_mask(masked, 0, 1, 1);
  test_packing(masked);

  /* split 80/20: train documents [0, 160), valid [160, 200) */
  mgt_config c = config(a, 7);
  mgt_data train, valid;
  T_OK(mgt_dataset_sources(&c, MPI_COMM_WORLD, NULL, &train, &valid));
  int *cover = calloc(NDOC * 64, sizeof(int));
  check_samples(&train, 400, 0, 160, 0, cover, "train");
  int mn = 1 << 30, mxc = 0;
  for (int d = 0; d < 160; d++)
    for (int j = 0; j < doc_len(d); j++) {
      int v = cover[d * 64 + j];
      mn = v < mn ? v : mn;
      mxc = v > mxc ? v : mxc;
    }
  T_CHECK(mn >= 1 && mxc <= 2,
          "train tokens covered between %d and %d times (400 samples, "
          "about 1.6 epochs)",
          mn, mxc);
  check_samples(&valid, 40, 160, NDOC, 0, NULL, "valid");
  int32_t first[4][SEQ + 1];
  T_OK(train.get(train.ctx, 0, 4, SEQ, &first[0][0]));

  /* again: the cached index gives the same samples */
  mgt_data t2, v2;
  T_OK(mgt_dataset_sources(&c, MPI_COMM_WORLD, NULL, &t2, &v2));
  int32_t again[4][SEQ + 1];
  T_OK(t2.get(t2.ctx, 0, 4, SEQ, &again[0][0]));
  T_CHECK(memcmp(first, again, sizeof first) == 0,
          "samples differ when read through the cached index");
  mgt_data_destroy(&t2), mgt_data_destroy(&v2);
  /* another seed: the same split, another order */
  c = config(a, 8);
  T_OK(mgt_dataset_sources(&c, MPI_COMM_WORLD, NULL, &t2, &v2));
  T_OK(t2.get(t2.ctx, 0, 4, SEQ, &again[0][0]));
  T_CHECK(memcmp(first, again, sizeof first) != 0, "another seed gave the same samples");
  check_samples(&t2, 400, 0, 160, 0, NULL, "train (seed 8)");
  mgt_data_destroy(&t2), mgt_data_destroy(&v2);

  { /* the epochs of a split: the fewest whose concatenated tokens hold the samples (Megatron-LM's
       _get_num_epochs: a sample may straddle two): documents [0, 108) hold 2744 tokens, 171
       samples of 16 + 1 each alone, so 856 samples need 5 epochs, not ceil(856 / 171) = 6 */
    char cache[300];
    snprintf(cache, sizeof cache, "%s/epochs", dir);
    c = config(a, 7);
    strcpy(c.split, "54,46,0");
    c.train_iters = 107; /* 856 samples */
    snprintf(c.data_cache_path, sizeof c.data_cache_path, "%s", cache);
    T_OK(mgt_dataset_sources(&c, MPI_COMM_WORLD, NULL, &t2, &v2));
    check_samples(&t2, 856, 0, 108, 0, NULL, "train (5 epochs)");
    mgt_data_destroy(&t2), mgt_data_destroy(&v2);
    int64_t tpe = 0, found = 0;
    for (int d = 0; d < 108; d++)
      tpe += doc_len(d);
    DIR *dd = opendir(cache);
    struct dirent *e;
    while (dd && (e = readdir(dd))) {
      char f[600];
      snprintf(f, sizeof f, "%s/%s", cache, e->d_name);
      FILE *in = strstr(e->d_name, ".index-") ? fopen(f, "rb") : NULL;
      int64_t h[3] = {0}; /* after the magic: documents of the index, samples, sequence */
      if (in && fseek(in, 8, SEEK_SET) == 0 && fread(h, sizeof h, 1, in) == 1 && h[0] % 108 == 0) {
        found++;
        T_CHECK(
            h[0] == 5 * 108 && h[1] == (5 * tpe - 1) / SEQ,
            "856 samples of 2744 tokens: an index of %lld documents (%lld epochs), %lld samples",
            (long long)h[0], (long long)(h[0] / 108), (long long)h[1]);
      }
      if (in) fclose(in);
    }
    if (dd) closedir(dd);
    T_CHECK(found == 1, "%lld train indices in %s", (long long)found, cache);
  }

  /* blending 1:3 */
  snprintf(blend_path, sizeof blend_path, "1\n%s\n3\n%s", a, b);
  c = config(blend_path, 7);
  T_OK(mgt_dataset_sources(&c, MPI_COMM_WORLD, NULL, &t2, &v2));
  int from_b = 0;
  int32_t buf[SEQ + 1];
  for (int s = 0; s < 400; s++) {
    T_OK(t2.get(t2.ctx, (uint64_t)s, 1, SEQ, buf));
    from_b += buf[0] >= 500000;
    int same = 1;
    for (int k = 1; k <= SEQ; k++)
      same &= (buf[k] >= 500000) == (buf[0] >= 500000);
    T_CHECK(same, "blended sample %d mixes datasets", s);
  }
  T_CHECK(abs(from_b - 300) <= 1, "blend 1:3 took %d of 400 samples from the second dataset",
          from_b);
  /* the order of Megatron-LM's build_blending_indices (helpers.cpp) for weights 0.25, 0.75 */
  static const int megatron[24] = {1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1,
                                   0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1};
  for (int s = 0; s < 24; s++) {
    T_OK(t2.get(t2.ctx, (uint64_t)s, 1, SEQ, buf));
    T_CHECK((buf[0] >= 500000) == megatron[s],
            "blended sample %d from dataset %d, Megatron-LM's %d", s, buf[0] >= 500000,
            megatron[s]);
  }
  printf("blending 1:3: %d of 400 samples from the second dataset\n", from_b);
  mgt_data_destroy(&t2), mgt_data_destroy(&v2);

  /* bad inputs are refused with the file named */
  c = config(bad, 7);
  mgt_status st = mgt_dataset_sources(&c, MPI_COMM_WORLD, NULL, &t2, &v2);
  T_CHECK(st == MGT_ERR_INPUT && strstr(mgt_error_message(), "incomplete.h5") &&
              strstr(mgt_error_message(), "complete"),
          "incomplete dataset: %s", mgt_error_message());
  char missing[300];
  snprintf(missing, sizeof missing, "%s/none", dir);
  c = config(missing, 7);
  st = mgt_dataset_sources(&c, MPI_COMM_WORLD, NULL, &t2, &v2);
  T_CHECK(st == MGT_ERR_INPUT && strstr(mgt_error_message(), "none.h5"), "missing dataset: %s",
          mgt_error_message());
  c = config(a, 7);
  c.vocab_size = 1000;
  st = mgt_dataset_sources(&c, MPI_COMM_WORLD, NULL, &t2, &v2);
  T_CHECK(st == MGT_ERR_INPUT && strstr(mgt_error_message(), "does not fit --vocab-size"),
          "vocabulary too small: %s", mgt_error_message());
  c = config(a, 7);
  c.seq_length = 5000;
  st = mgt_dataset_sources(&c, MPI_COMM_WORLD, NULL, &t2, &v2);
  T_CHECK(st == MGT_ERR_INPUT && strstr(mgt_error_message(), "too few for one sample"),
          "sequence longer than the split: %s", mgt_error_message());

  mgt_data_destroy(&train), mgt_data_destroy(&valid);
  free(cover);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  MPI_Finalize();
  return t_report("test_dataset");
}
