/* A text table whose columns are padded to their widest cell; the last column is not padded. */
#ifndef SM70OPS_INTEGRATION_CLI_TABLE_H_
#define SM70OPS_INTEGRATION_CLI_TABLE_H_

#include <stdint.h>
#include <stdio.h>

#include "abi/sm70ops.h"

/* kTableMaxRows: a header and check's kModelMaxCases rows (check.c asserts it). */
enum { kTableMaxColumns = 10, kTableMaxRows = 65, kTableCellBytes = SM70OPS_MESSAGE_BYTES };

typedef struct cli_table {
  int32_t columns;
  int32_t rows; /* the header included */
  char cells[kTableMaxRows][kTableMaxColumns][kTableCellBytes];
} cli_table;

/* The first row is the header; `columns` <= kTableMaxColumns. */
void table_init(cli_table *table, const char *const *header, int32_t columns);
/* Copies `columns` cells (truncated to kTableCellBytes); rows beyond kTableMaxRows are dropped. */
void table_add_row(cli_table *table, const char *const *cells);
void table_print(const cli_table *table, FILE *out);

#endif /* SM70OPS_INTEGRATION_CLI_TABLE_H_ */
