/* mgt plot: the loss curves of one or more --metrics-file JSON-lines files (mgt train,
   mgt finetune) drawn as one standalone SVG 1.1 picture: training and validation loss above,
   the learning rate below, against iterations or tokens seen. Not collective. */
#pragma once

#include <stdio.h>

#include "mgt/common.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { MGT_PLOT_MAX_FILES = 64 };

typedef struct mgt_plot_opts {
  const char *files[MGT_PLOT_MAX_FILES]; /* the metrics files: views into argv */
  int n_files;
  char output[MGT_PATH_MAX];
  char labels[8192]; /* comma-separated legend labels, one per file; empty: the file names */
  char title[1024];
  int x;         /* 0 iteration, 1 tokens */
  int metric;    /* 0 loss, 1 lm_loss, 2 sop_loss */
  int log_scale; /* log y axis for the loss */
  int width, height;
  int seq_length; /* tokens per sample for --x tokens; 0: from the metrics */
} mgt_plot_opts;

void mgt_plot_defaults(mgt_plot_opts *o);
/* Parses argv[first..argc): flags, and every other argument as a metrics file. */
MGT_NODISCARD mgt_status mgt_plot_parse(mgt_plot_opts *o, int argc, char **argv, int first,
                                        int *help);
void mgt_plot_usage(FILE *f);
/* Reads the files, writes the SVG to o->output (a temporary file, then published) and one
   summary line to `out`. Bad files and an output that cannot be created are input errors. */
MGT_NODISCARD mgt_status mgt_plot_run(const mgt_plot_opts *o, FILE *out);

#ifdef __cplusplus
}
#endif
