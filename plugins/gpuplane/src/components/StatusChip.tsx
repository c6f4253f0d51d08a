import Chip from '@material-ui/core/Chip';

/** A state as a solid chip in its color (grey for states without one). */
export function StatusChip(props: { value: string; colors: Record<string, string>; testId: string }) {
  const { value, colors, testId } = props;
  return (
    <Chip
      size="small"
      label={value}
      data-testid={testId}
      style={{ background: colors[value] ?? '#9e9e9e', color: 'white', fontWeight: 600 }}
    />
  );
}
