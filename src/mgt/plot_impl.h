/* Private to mgt plot (src/cmd/plot.c: flags, reading the runs; plot_svg.c: axes, the SVG). */
#pragma once

#include <stddef.h>
#include <stdio.h>

#include "mgt/plot.h"

/* The namespace of the plot groups' axis attributes. */
#define PLOT_NS "urn:x-megatron-c:plot"

/* --x and --metric choices, indexed by mgt_plot_opts.x and .metric. */
extern const char *const plot_xaxes[];
extern const char *const plot_metrics[];

typedef struct point {
  double it, x, y;
  size_t line; /* of the file: the later of two lines of one iteration wins */
} point;

typedef struct series {
  point *p;
  size_t n, cap;
} series;

enum { MAX_SETS = 16, NAME_LEN = 256 };

typedef struct run {
  char label[512];
  series loss, lr, clock; /* clock: tokens seen at each logged iteration */
  series valid[MAX_SETS]; /* validation sets: one for pretraining, any for fine-tuning */
  char set[MAX_SETS][NAME_LEN];
  int n_sets;
  double prev_it, prev_samples; /* the last training line read (a log interval's start) */
} run;

/* Each run's legend label: the file's name, or --labels. */
void plot_make_labels(const mgt_plot_opts *o, run *runs);
/* The picture of n runs. */
void plot_write_svg(FILE *f, const mgt_plot_opts *o, const run *runs, int n);
